"""What a task card shows besides τ²'s title: the parts that tell one task from another,
and, under a search, where each word matched.

Telecom's 2,285 tasks share three titles ("You mobile data is not working properly." on
254 of them): τ² tells them apart in the id, ``[<issue type>]<subtask>|<subtask>…
[PERSONA:<None|Easy|Hard>]`` (its task generator writes it so), and in the scenario's
persona. Airline and retail titles repeat too (retail: 91 titles for 114 tasks): their
tasks differ by who calls (the known info's first sentence), what the agent must do (the
expected actions' tools) and, where even those agree (retail 5–9: one customer, one
exchange), by the rest of the reason for call: a card whose title another card of the
list shares shows that rest from the first word where they differ.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from apps.tasks.models import Task

__all__ = ["Match", "TaskCard", "TelecomParts", "task_cards", "telecom_parts"]

_TELECOM_ID = re.compile(r"^\[(?P<issue>[^\]]+)\](?P<subtasks>.*?)\[PERSONA:(?P<persona>[^\]]*)\]$")
_FIRST_SENTENCE = re.compile(r"(?<=[.!?])\s")
SNIPPET = 40  # characters of context each side of a matched word
DIFFERS = 300  # characters of the reason for call shown from where same-titled tasks differ


@dataclass(frozen=True)
class TelecomParts:
    """A telecom task id read as τ² writes it."""

    issue: str  # "mobile data issue"
    subtasks: tuple[str, ...]  # ("airplane mode on", "data mode off")
    persona: str  # "Easy", "Hard", or "" for τ²'s PERSONA:None


def telecom_parts(task_id: str) -> TelecomParts | None:
    """The issue type, the subtasks and the persona of a telecom-style id; ``None`` for
    any other id (airline's "0", mock's "create_task_1")."""
    found = _TELECOM_ID.match(task_id or "")
    if found is None:
        return None
    persona = found["persona"].strip()
    return TelecomParts(
        issue=found["issue"].replace("_", " "),
        subtasks=tuple(s.replace("_", " ") for s in found["subtasks"].split("|") if s),
        persona="" if persona.lower() == "none" else persona,
    )


@dataclass(frozen=True)
class Match:
    """Where the search's words were found in one field: ``field`` names it as the page
    says it (id, title, reason for call, expected actions); the text is cut in three so the
    template marks the word without marking up anything itself."""

    field: str
    before: str
    word: str
    after: str


@dataclass(frozen=True)
class TaskCard:
    task: Task
    telecom: TelecomParts | None
    customer: str  # "Yusuf Rossi in zipcode 19122" (airline, retail); "" when unknown
    actions: tuple[str, ...]  # the expected actions' tools, in order, once each
    matches: tuple[Match, ...]
    differs: str = ""  # the reason for call where it differs from same-titled cards'


def _customer(known_info: str) -> str:
    first = _FIRST_SENTENCE.split(" ".join((known_info or "").split()), maxsplit=1)[0]
    if not first.lower().startswith("you are "):
        return ""
    return first[len("you are ") :].rstrip(".")


def _snippet(field: str, text: str, word: str) -> Match | None:
    at = text.lower().find(word)
    if at < 0:
        return None
    start, end = max(0, at - SNIPPET), min(len(text), at + len(word) + SNIPPET)
    return Match(
        field=field,
        before=("…" if start else "") + text[start:at],
        word=text[at : at + len(word)],
        after=text[at + len(word) : end] + ("…" if end < len(text) else ""),
    )


def _matches(task: Task, words: list[str]) -> tuple[Match, ...]:
    """For each word, the first field that holds it (the order the explorer searches)."""
    fields = (
        ("id", task.task_id),
        ("title", task.title),
        ("reason for call", " ".join((task.reason_for_call or "").split())),
        ("expected actions", ", ".join(task.tool_names or [])),
    )
    found = []
    for word in dict.fromkeys(words):
        for name, text in fields:
            match = _snippet(name, text, word)
            if match is not None:
                found.append(match)
                break
    return tuple(found)


def _rest(task: Task) -> list[str]:
    """The words of the reason for call after its title (the first sentence)."""
    words = " ".join((task.reason_for_call or "").split()).split(" ")
    return words[len(task.title.split()) :] if task.title else words


def _differences(tasks: list[Task]) -> dict[int, str]:
    """For the tasks (not telecom: its ids tell them apart) whose title another of
    ``tasks`` shares, the rest of the reason for call from the first word where the
    group's differ ("…" marks what is left out), by primary key."""
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        if telecom_parts(task.task_id) is None:
            groups.setdefault(task.title, []).append(task)
    out = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        rests = [_rest(t) for t in group]
        common = 0
        while all(len(r) > common for r in rests) and len({r[common] for r in rests}) == 1:
            common += 1
        for task, rest in zip(group, rests, strict=True):
            shown = " ".join(rest[common:])
            if len(shown) > DIFFERS:
                shown = shown[:DIFFERS].rsplit(" ", 1)[0] + " …"
            out[task.pk] = ("… " if common and shown else "") + shown
    return out


def task_cards(tasks: Iterable[Task], *, q: str = "") -> list[TaskCard]:
    """The cards of ``tasks`` (read with :func:`~apps.tasks.selectors.task_card_fields`),
    with where the words of ``q`` matched, and how same-titled ones differ."""
    tasks = list(tasks)
    words = q.lower().split()
    differs = _differences(tasks)
    return [
        TaskCard(
            task=task,
            telecom=telecom_parts(task.task_id),
            customer=_customer(task.known_info),
            actions=tuple(task.tool_names or ()),
            matches=_matches(task, words) if words else (),
            differs=differs.get(task.pk, ""),
        )
        for task in tasks
    ]

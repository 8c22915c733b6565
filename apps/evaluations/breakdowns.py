"""The paper's breakdowns of an evaluation: pass^1 by group of tasks, each with its n and
a 95% interval, and the Default vs No-User vs Oracle-plan comparison.

Over the runs τ²'s metrics count (``selectors.rewards_by_task``: completed runs and the
model's own failures, as reward 0). Each group's pass^1 is τ²'s (``compute_metrics``)
over its tasks; its interval is a percentile bootstrap over those tasks
(``tau2_env.engine.evaluation.bootstrap_pass_hat_k``, 1,000 resamples, seed 0, tasks in the
evaluation's order: the same page shows the same interval). ``n`` is the group's tasks
with at least one counted run.

The groups (fixed, so two evaluations' breakdowns line up):

* **expected actions**: how many actions the task's evaluation criteria expect
  (``Task.expected_calls``), in buckets 0–1, 2–3, 4–6 and 7+;
* **persona**: telecom's tasks name the customer's persona in their id
  (``…[PERSONA:None|Easy|Hard]``); other domains' tasks have none;
* **telecom issue type**: the bracket opening a telecom task's id (``[mms_issue]…``,
  ``[mobile_data_issue]…``, ``[service_issue]…``; its description's purpose says the
  same), and **telecom sub-issue**: the ``|``-separated faults the id lists after it
  (a task counts in each of its faults' groups, so those n add up to more than the tasks);
* **read-only vs write**: whether one of the task's expected actions writes to the
  database (``Task.changes_db``, from τ²'s tool types).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.core.cache import cache

from apps.evaluations import selectors
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from apps.tasks.models import Task
from tau2_env.engine.evaluation import bootstrap_pass_hat_k, compute_metrics

__all__ = [
    "ACTION_BUCKETS",
    "Breakdown",
    "Group",
    "ModeRow",
    "evaluation_breakdowns",
    "evaluation_breakdowns_kept",
    "mode_comparison",
    "mode_comparison_kept",
]

# (label, lowest, highest) expected actions; None: no upper end.
ACTION_BUCKETS: tuple[tuple[str, int, int | None], ...] = (
    ("0–1", 0, 1),
    ("2–3", 2, 3),
    ("4–6", 4, 6),
    ("7+", 7, None),
)
PERSONAS = ("None", "Easy", "Hard")
ISSUE_TYPES = {
    "mobile_data_issue": "mobile data / slow internet",
    "mms_issue": "MMS (picture messages)",
    "service_issue": "no service / connection",
}
_PERSONA = re.compile(r"\[PERSONA:(\w+)\]\s*$")
_ISSUE = re.compile(r"^\[(\w+)\]")
SAMPLES = 1000
_CACHE_SECONDS = 24 * 3600


@dataclass(frozen=True)
class Group:
    """One group of tasks: ``n`` tasks with counted runs (``runs`` of them), pass^1 and
    its 95% interval (``None`` when the group has no counted run)."""

    label: str
    n: int
    runs: int
    pass_1: float | None
    low: float | None
    high: float | None

    @property
    def percent(self) -> float:
        return round(100 * (self.pass_1 or 0.0), 1)

    @property
    def low_percent(self) -> float:
        return round(100 * (self.low or 0.0), 1)

    @property
    def high_percent(self) -> float:
        return round(100 * (self.high or 0.0), 1)

    def as_json(self) -> dict:
        interval = [self.low, self.high] if self.low is not None else None
        return {
            "label": self.label,
            "n": self.n,
            "runs": self.runs,
            "pass_1": self.pass_1,
            "ci95": interval,
        }


@dataclass(frozen=True)
class Breakdown:
    """pass^1 by one way of grouping the tasks; ``applies`` is False (and ``note`` says
    why) when the evaluation's tasks carry no such grouping."""

    key: str
    title: str
    note: str
    groups: list[Group] = field(default_factory=list)
    applies: bool = True

    def as_json(self) -> dict:
        return {
            "key": self.key,
            "title": self.title,
            "note": self.note,
            "applies": self.applies,
            "groups": [g.as_json() for g in self.groups],
        }


def persona_of(task_id: str) -> str | None:
    found = _PERSONA.search(task_id)
    return found.group(1) if found else None


def issue_type_of(task_id: str) -> str | None:
    found = _ISSUE.match(task_id)
    return found.group(1) if found else None


def sub_issues_of(task_id: str) -> list[str]:
    if issue_type_of(task_id) is None:
        return []
    middle = _PERSONA.sub("", _ISSUE.sub("", task_id, count=1))
    return [part for part in middle.split("|") if part]


def _actions_bucket(count: int) -> str:
    for label, low, high in ACTION_BUCKETS:
        if count >= low and (high is None or count <= high):
            return label
    raise ValueError(count)


def _group(label: str, rewards: dict[str, list[float | None]]) -> Group:
    counted = {task: values for task, values in rewards.items() if values}
    if not counted:
        return Group(label=label, n=0, runs=0, pass_1=None, low=None, high=None)
    metrics = compute_metrics(counted)
    low, high = _interval(counted)
    return Group(
        label=label,
        n=len(counted),
        runs=metrics.runs,
        pass_1=metrics.pass_hat_ks[1],
        low=low,
        high=high,
    )


def _interval(counted: dict[str, list[float | None]]) -> tuple[float, float]:
    """pass^1's bootstrap interval, remembered by what it was computed from (a full
    split's breakdowns resample ~1M times: about a second, once per change of rewards)."""
    payload = json.dumps([SAMPLES, list(counted.items())]).encode()
    key = "evaluations:breakdown-ci:" + hashlib.sha256(payload).hexdigest()
    found = cache.get(key)
    if found is None:
        found = bootstrap_pass_hat_k(counted, ks=[1], samples=SAMPLES)[1]
        cache.set(key, found, _CACHE_SECONDS)
    return tuple(found)


def _grouped(
    labels: Iterable[str],
    rewards: dict[str, list[float | None]],
    groups_of: Callable[[str], Iterable[str]],
    names: dict[str, str] | None = None,
) -> list[Group]:
    """A group per label (named by ``names``, else the label), of the tasks
    ``groups_of`` puts in it."""
    members: dict[str, dict[str, list[float | None]]] = defaultdict(dict)
    for task_id, values in rewards.items():
        for label in groups_of(task_id):
            members[label][task_id] = values
    names = names or {}
    return [_group(names.get(label, label), members.get(label, {})) for label in labels]


def evaluation_breakdowns(
    evaluation: Evaluation, runs: list[dict] | None = None
) -> list[Breakdown]:
    """Every breakdown of ``evaluation`` (see the module docstring), in a fixed order."""
    runs = selectors.evaluation_runs(evaluation) if runs is None else runs
    rewards = dict(selectors.rewards_by_task(runs))
    tasks = {
        t["task_id"]: t
        for t in Task.objects.filter(
            domain_id=evaluation.domain, task_id__in=evaluation.task_ids
        ).values("task_id", "expected_calls", "changes_db")
    }
    ids = list(evaluation.task_ids)
    # In the evaluation's task order: the bootstrap resamples in the order it is given,
    # so the same evaluation always shows the same intervals.
    rewards = {t: rewards[t] for t in ids if t in tasks and t in rewards}
    breakdowns = [
        Breakdown(
            key="expected_actions",
            title="By number of expected actions",
            note="The actions the task's evaluation criteria expect, in buckets "
            + ", ".join(label for label, _, _ in ACTION_BUCKETS)
            + ".",
            groups=_grouped(
                [label for label, _, _ in ACTION_BUCKETS],
                rewards,
                lambda t: [_actions_bucket(tasks[t]["expected_calls"])],
            ),
        )
    ]
    has_persona = any(persona_of(t) for t in ids)
    breakdowns.append(
        Breakdown(
            key="persona",
            title="By persona",
            note="The customer's persona, as telecom's task ids name it (None, Easy, Hard)."
            if has_persona
            else f"Not for {evaluation.domain}: only telecom's tasks name a persona.",
            groups=_grouped(PERSONAS, rewards, lambda t: [persona_of(t) or ""])
            if has_persona
            else [],
            applies=has_persona,
        )
    )
    has_issue = any(issue_type_of(t) for t in ids)
    subs = sorted({s for t in ids for s in sub_issues_of(t)})
    breakdowns.append(
        Breakdown(
            key="issue_type",
            title="By telecom issue type",
            note="The issue a telecom task's id opens with (its purpose says the same)."
            if has_issue
            else f"Not for {evaluation.domain}: only telecom's tasks have an issue type.",
            groups=_grouped(
                sorted({issue_type_of(t) for t in ids if issue_type_of(t)}),
                rewards,
                lambda t: [issue_type_of(t) or ""],
                ISSUE_TYPES,
            )
            if has_issue
            else [],
            applies=has_issue,
        )
    )
    breakdowns.append(
        Breakdown(
            key="sub_issue",
            title="By telecom sub-issue",
            note="Each fault a telecom task's id lists; a task counts in each of its "
            "faults' groups, so the n add up to more than the tasks."
            if subs
            else f"Not for {evaluation.domain}: only telecom's tasks list faults.",
            groups=_grouped(subs, rewards, sub_issues_of) if subs else [],
            applies=bool(subs),
        )
    )
    breakdowns.append(
        Breakdown(
            key="kind",
            title="Read-only vs write",
            note="Whether one of the task's expected actions writes to the database.",
            groups=_grouped(
                ["read-only", "write"],
                rewards,
                lambda t: ["write" if tasks[t]["changes_db"] else "read-only"],
            ),
        )
    )
    return breakdowns


def evaluation_breakdowns_kept(evaluation: Evaluation, *, stamp: str) -> list[Breakdown]:
    """:func:`evaluation_breakdowns`, computed once per ``stamp`` (what the evaluation's
    live state is made of: it changes with any run's status or reward) and kept for
    every viewer, as the page's state is."""
    key = f"evaluation-breakdowns:{evaluation.pk}"
    digest = hashlib.sha256(stamp.encode()).hexdigest()
    kept = cache.get(key)
    if kept is not None and kept[0] == digest:
        return kept[1]
    computed = evaluation_breakdowns(evaluation)
    cache.set(key, (digest, computed), _CACHE_SECONDS)
    return computed


@dataclass(frozen=True)
class ModeRow:
    """One mode's evaluation in the comparison."""

    mode: str
    label: str
    evaluation: Evaluation
    overall: Group


_COMPARED = (Evaluation.Status.COMPLETED, Evaluation.Status.IMPORTED, Evaluation.Status.STOPPED)


def mode_comparison(evaluation: Evaluation) -> list[ModeRow] | None:
    """Default vs No-User vs Oracle plan for ``evaluation``'s agent model, customer and
    domain: the latest finished evaluation of each mode (this one for its own), or
    ``None`` unless the team has all three."""
    latest: dict[str, Evaluation] = {evaluation.mode: evaluation}
    others = (
        Evaluation.objects.filter(
            domain=evaluation.domain,
            agent_model=evaluation.agent_model,
            user_model=evaluation.user_model,
            status__in=_COMPARED,
        )
        .exclude(mode=evaluation.mode)
        .order_by("-created_at", "-id")
    )
    for other in others:
        latest.setdefault(other.mode, other)
    if set(latest) != set(Run.Mode.values):
        return None
    rows = []
    for mode in Run.Mode.values:
        chosen = latest[mode]
        rewards = selectors.rewards_by_task(selectors.evaluation_runs(chosen))
        rows.append(
            ModeRow(
                mode=mode,
                label=Run.Mode(mode).label,
                evaluation=chosen,
                overall=_group("all tasks", dict(rewards)),
            )
        )
    return rows


# Another mode's evaluation finishing shows within this long on a page that does not change.
COMPARISON_SECONDS = 60


def mode_comparison_kept(evaluation: Evaluation) -> list[ModeRow] | None:
    """:func:`mode_comparison`, kept for :data:`COMPARISON_SECONDS` per evaluation."""
    key = f"evaluation-mode-comparison:{evaluation.pk}"
    kept = cache.get(key)
    if kept is not None:
        return kept[0]
    rows = mode_comparison(evaluation)
    cache.set(key, (rows,), COMPARISON_SECONDS)
    return rows

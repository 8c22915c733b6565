"""Which runs a dataset is cut from: the history's filters, an evaluation, a training
session, a lowest reward, without critical labels — all read from one query string.

The history's own filters are read by ``apps.runs.selectors.RunFilters.from_params`` and
applied by ``run_list``, so the query string of the history page selects here exactly
the runs it lists. A dataset then keeps the runs that are finished and scored by τ²
(``completed``) in τ²'s default mode (an ablation's agent was sent another system
prompt; those are counted and left out), at most :data:`MAX_RUNS` of them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from django.db.models import QuerySet
from django.utils.http import urlencode

from apps.datasets.conversation import PAIRINGS, Conversation, Scored, pair_plan
from apps.evaluations.models import Evaluation
from apps.runs.models import Run, RunEvent
from apps.runs.selectors import RunFilters, run_list
from apps.training.models import TrainingSession

# The most runs one download (or one push to the Hub) holds.
MAX_RUNS = 5000
# Runs whose messages are read in one query while a download is written.
CHUNK = 200

SFT = "sft"
PREFERENCE = "preference"
KINDS = (SFT, PREFERENCE)
JSONL = "jsonl"
PARQUET = "parquet"
FORMATS = (JSONL, PARQUET)


class SelectionError(ValueError):
    """The query string does not say a selection; ``str()`` says what is wrong, in words."""


@dataclass(frozen=True)
class Selection:
    """A set of runs and how to write them. ``filters`` are the history's; the rest are
    this page's own parameters (``evaluation``, ``session``, ``min_reward``,
    ``no_critical``, ``type``, ``format``, ``pairs``)."""

    filters: RunFilters = field(default_factory=RunFilters)
    evaluation: int | None = None
    session: int | None = None
    min_reward: float | None = None
    no_critical: bool = False
    kind: str = SFT
    format: str = JSONL
    pairing: str = PAIRINGS[0]

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> Selection:
        """The selection a query string says; raises :class:`SelectionError`."""
        kind = _choice(params, "type", KINDS)
        return cls(
            filters=RunFilters.from_params(params),
            evaluation=_pk(params, "evaluation"),
            session=_pk(params, "session"),
            min_reward=_reward(params),
            no_critical=(params.get("no_critical") or "").strip() in ("1", "on", "true"),
            kind=kind,
            format=_choice(params, "format", FORMATS),
            pairing=_choice(params, "pairs", PAIRINGS),
        )

    def runs_query(self) -> dict[str, str]:
        """The parameters that choose the runs (not how they are written)."""
        query = dict(self.filters.as_query())
        if self.evaluation is not None:
            query["evaluation"] = str(self.evaluation)
        if self.session is not None:
            query["session"] = str(self.session)
        if self.min_reward is not None:
            query["min_reward"] = f"{self.min_reward:g}"
        if self.no_critical:
            query["no_critical"] = "1"
        return query

    def as_query(self) -> str:
        """The whole selection as a query string (what the page and downloads link with)."""
        query = self.runs_query()
        query.update(type=self.kind, format=self.format)
        if self.kind == PREFERENCE:
            query["pairs"] = self.pairing
        return urlencode(query)


def _choice(params: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    value = (params.get(name) or "").strip() or choices[0]
    if value not in choices:
        raise SelectionError(f"Unknown {name} {value[:40]!r}: choose one of {', '.join(choices)}.")
    return value


def _pk(params: Mapping[str, str], name: str) -> int | None:
    value = (params.get(name) or "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise SelectionError(f"The {name} should be a number, not {value[:40]!r}.")
    return int(value)


def _reward(params: Mapping[str, str]) -> float | None:
    value = (params.get("min_reward") or "").strip()
    if not value:
        return None
    try:
        reward = float(value)
    except ValueError:
        reward = math.nan
    if not 0 <= reward <= 1:
        raise SelectionError(
            f"The lowest reward should be a number from 0 to 1, not {value[:40]!r}."
        )
    return reward


def _session_runs(runs: QuerySet[Run], session: int) -> QuerySet[Run]:
    """The runs of training session ``session`` (its episodes' agent runs)."""
    if not TrainingSession.objects.filter(pk=session).exists():
        raise SelectionError(f"There is no training session {session}.")
    return runs.filter(training_episode__session_id=session)


def selected_runs(selection: Selection) -> QuerySet[Run]:
    """Every run the selection's filters choose, finished or not (the history's order)."""
    runs = run_list(filters=selection.filters)
    if selection.evaluation is not None:
        if not Evaluation.objects.filter(pk=selection.evaluation).exists():
            raise SelectionError(f"There is no evaluation {selection.evaluation}.")
        runs = runs.filter(evaluation_id=selection.evaluation)
    if selection.session is not None:
        runs = _session_runs(runs, selection.session)
    if selection.min_reward is not None:
        runs = runs.filter(reward__gte=selection.min_reward)
    if selection.no_critical:
        runs = runs.filter(has_critical=False)
    return runs


def dataset_runs(selection: Selection) -> QuerySet[Run]:
    """The selected runs a dataset holds: completed (scored by τ²) in the default mode,
    in the order of their ids."""
    return (
        selected_runs(selection)
        .filter(status=Run.Status.COMPLETED, mode=Run.Mode.DEFAULT)
        .order_by("id")
    )


@dataclass(frozen=True)
class Counts:
    """What the page says about a selection before anything is written."""

    selected: int  # every run the filters choose
    rows: int  # the ones a dataset holds
    unfinished: int  # not completed: left out
    ablations: int  # completed in an ablation (No-User, Oracle plan): left out
    pairs: int  # preference pairs of the rows, with the selection's pairing
    preference: bool = False  # the selection asks for preference pairs, not SFT rows

    @property
    def too_many(self) -> bool:
        return self.rows > MAX_RUNS

    @property
    def refusal(self) -> str:
        """Why nothing can be downloaded, in words ('' when it can)."""
        if self.too_many:
            return (
                f"This selection holds {self.rows:,} runs; a dataset holds at most "
                f"{MAX_RUNS:,}. Narrow it down: a domain, a model, an evaluation or a "
                "lowest reward."
            )
        if not self.rows:
            return "No finished run matches this selection: there is nothing to download."
        if self.preference and not self.pairs:
            return (
                f"These {self.rows:,} runs make no preference pair: a pair needs two runs of "
                "one task whose rewards differ. Add runs that failed the tasks others solved "
                "(or solved what others failed), or download them as SFT rows."
            )
        return ""


def selection_counts(selection: Selection) -> Counts:
    """How many runs the selection chooses, how many a dataset holds, and its pairs."""
    selected = selected_runs(selection)
    completed = selected.filter(status=Run.Status.COMPLETED)
    rows = dataset_runs(selection)
    total, done, kept = selected.count(), completed.count(), rows.count()
    pairs = len(pair_plan_of(selection)) if kept <= MAX_RUNS else 0
    return Counts(
        selected=total,
        rows=kept,
        unfinished=total - done,
        ablations=done - kept,
        pairs=pairs,
        preference=selection.kind == PREFERENCE,
    )


def scored_runs(selection: Selection) -> list[Scored]:
    """The dataset's runs as pairing sees them (no messages read)."""
    return [
        Scored(run_id=pk, domain=domain, task_id=task_id, reward=reward)
        for pk, domain, task_id, reward in dataset_runs(selection).values_list(
            "id", "domain", "task__task_id", "reward"
        )
    ]


def pair_plan_of(selection: Selection) -> list[tuple[int, int]]:
    """The selection's preference pairs, ``(passing run id, failing run id)``."""
    return pair_plan(scored_runs(selection), pairing=selection.pairing)


def conversations(run_ids: list[int]) -> Iterator[Conversation]:
    """The runs ``run_ids`` with their stored messages, in the order given, reading
    :data:`CHUNK` runs' messages per query."""
    for start in range(0, len(run_ids), CHUNK):
        chunk = run_ids[start : start + CHUNK]
        runs = {
            row[0]: row
            for row in Run.objects.filter(pk__in=chunk).values_list(
                "id", "domain", "task__task_id", "reward", "agent_model", "kind", "evaluation_id"
            )
        }
        messages: dict[int, list] = {pk: [] for pk in chunk}
        for run_id, message in (
            RunEvent.objects.filter(run_id__in=chunk)
            .order_by("run_id", "seq")
            .values_list("run_id", "message")
        ):
            messages[run_id].append(message)
        for pk in chunk:
            _, domain, task_id, reward, model, kind, evaluation_id = runs[pk]
            yield Conversation(
                run_id=pk,
                domain=domain,
                task_id=task_id,
                reward=reward,
                model=model,
                kind=kind,
                evaluation_id=evaluation_id,
                messages=tuple(messages[pk]),
            )

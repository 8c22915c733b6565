"""Reads of runs: the history, one run, its events."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404

from apps.runs.models import ReviewLabel, Run, RunEvent

# A reward at or above this counts as solved (τ² rewards are 0 or 1, stored as floats).
SOLVED = 0.999


@dataclass(frozen=True)
class RunFilters:
    domain: str = ""
    task: str = ""
    model: str = ""
    person: str = ""
    status: str = ""
    reward: str = ""  # "1" (solved), "0" (not solved), "none" (no score)
    critical: str = ""  # "1": has a critical review label
    category: str = ""  # a ReviewLabel.Category, or "none" (no label at all)
    kind: str = ""  # a Run.Kind: model runs, play sessions, agents via the API

    @classmethod
    def from_params(cls, params) -> RunFilters:
        return cls(**{name: (params.get(name) or "").strip()[:200] for name in cls.__annotations__})

    def as_query(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}


def run_list(*, filters: RunFilters) -> QuerySet[Run]:
    """The team's runs, newest first, narrowed by ``filters``."""
    runs = Run.objects.select_related("task", "created_by").annotate(
        has_critical=labelled(severity=ReviewLabel.Severity.CRITICAL)
    )
    if filters.domain:
        runs = runs.filter(domain=filters.domain)
    if filters.task:
        runs = runs.filter(task__task_id=filters.task)
    if filters.model:
        runs = runs.filter(agent_model__icontains=filters.model)
    if filters.person:
        runs = runs.filter(created_by__username=filters.person)
    if filters.kind in Run.Kind.values:
        runs = runs.filter(kind=filters.kind)
    if filters.status in Run.Status.values:
        runs = runs.filter(status=filters.status)
    if filters.reward == "1":
        runs = runs.filter(reward__gte=SOLVED)
    elif filters.reward == "0":
        runs = runs.filter(reward__lt=SOLVED)
    elif filters.reward == "none":
        runs = runs.filter(reward__isnull=True)
    if filters.critical == "1":
        runs = runs.filter(has_critical=True)
    if filters.category in ReviewLabel.Category.values:
        runs = runs.filter(labelled(category=filters.category))
    elif filters.category == "none":
        runs = runs.filter(~labelled())
    return runs.order_by("-created_at", "-id")


def labelled(**label_filters) -> Exists:
    """The run has a review label that counts (a person's, or an accepted auto-review
    finding) matching ``label_filters`` (one row per run, unlike a join)."""
    return Exists(
        ReviewLabel.objects.filter(ReviewLabel.COUNTED, run=OuterRef("pk"), **label_filters)
    )


def run_event_get(*, run_id: int, seq: int) -> RunEvent:
    """Message ``seq`` of run ``run_id`` (404 when the run has no such message)."""
    try:
        return RunEvent.objects.get(run_id=run_id, seq=seq)
    except RunEvent.DoesNotExist:
        raise Http404(f"No message {seq} in run {run_id}") from None


def run_get(*, pk: int) -> Run:
    try:
        return Run.objects.select_related("task", "task__domain", "created_by").get(pk=pk)
    except Run.DoesNotExist:
        raise Http404(f"No run {pk}") from None


def run_events(*, run_id: int, after: int = -1) -> QuerySet[RunEvent]:
    """The run's events with ``seq`` greater than ``after``, in order."""
    return RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")

"""Reads of runs: the history, one run, its events."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import Http404

from apps.runs.models import Run, RunEvent


@dataclass(frozen=True)
class RunFilters:
    domain: str = ""
    task: str = ""
    model: str = ""
    person: str = ""
    status: str = ""
    reward: str = ""  # "1" (solved), "0" (not solved), "none" (no score)

    @classmethod
    def from_params(cls, params) -> RunFilters:
        return cls(**{name: (params.get(name) or "").strip()[:200] for name in cls.__annotations__})

    def as_query(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}


def run_list(*, filters: RunFilters) -> QuerySet[Run]:
    """The team's runs, newest first, narrowed by ``filters``."""
    runs = Run.objects.select_related("task", "created_by")
    if filters.domain:
        runs = runs.filter(domain=filters.domain)
    if filters.task:
        runs = runs.filter(task__task_id=filters.task)
    if filters.model:
        runs = runs.filter(agent_model__icontains=filters.model)
    if filters.person:
        runs = runs.filter(created_by__username=filters.person)
    if filters.status in Run.Status.values:
        runs = runs.filter(status=filters.status)
    if filters.reward == "1":
        runs = runs.filter(reward__gte=0.999)
    elif filters.reward == "0":
        runs = runs.filter(reward__lt=0.999)
    elif filters.reward == "none":
        runs = runs.filter(reward__isnull=True)
    return runs.order_by("-created_at", "-id")


def run_get(*, pk: int) -> Run:
    try:
        return Run.objects.select_related("task", "task__domain", "created_by").get(pk=pk)
    except Run.DoesNotExist:
        raise Http404(f"No run {pk}") from None


def run_events(*, run_id: int, after: int = -1) -> QuerySet[RunEvent]:
    """The run's events with ``seq`` greater than ``after``, in order."""
    return RunEvent.objects.filter(run_id=run_id, seq__gt=after).order_by("seq")


def review_flags(*, task) -> list:
    """The review labels that runs of ``task`` gathered, newest first (for the task page)."""
    from apps.runs.models import ReviewLabel

    return list(
        ReviewLabel.objects.filter(run__task=task)
        .select_related("run", "event", "created_by")
        .order_by("-created_at")[:50]
    )

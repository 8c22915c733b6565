"""Reads of runs: the history, one run, its events."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Case, Exists, IntegerField, OuterRef, Q, QuerySet, Value, When
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
        has_critical=_labelled(severity=ReviewLabel.Severity.CRITICAL)
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
        runs = runs.filter(_labelled(category=filters.category))
    elif filters.category == "none":
        runs = runs.filter(~_labelled())
    return runs.order_by("-created_at", "-id")


def _labelled(**label_filters) -> Exists:
    """The run has a review label matching ``label_filters`` (one row per run, unlike a join)."""
    return Exists(ReviewLabel.objects.filter(run=OuterRef("pk"), **label_filters))


def review_queue() -> QuerySet[Run]:
    """Finished runs nobody labelled yet: failures first (failed, or a reward below 1),
    then the rest; newest first within each. ``needs_look`` is 0 for a failure, 1 otherwise."""
    failure = Q(status=Run.Status.FAILED) | Q(reward__lt=SOLVED)
    return (
        Run.objects.filter(status__in=Run.FINAL)
        .filter(~_labelled())
        .select_related("task", "created_by")
        .annotate(
            needs_look=Case(
                When(failure, then=Value(0)), default=Value(1), output_field=IntegerField()
            )
        )
        .order_by("needs_look", "-created_at", "-id")
    )


@dataclass(frozen=True)
class RunLabels:
    """A run's review labels: on the run itself, and per message (by ``seq``), newest first."""

    on_run: list[ReviewLabel]
    by_seq: dict[int, list[ReviewLabel]]


def run_labels(*, run_id: int) -> RunLabels:
    on_run: list[ReviewLabel] = []
    by_seq: dict[int, list[ReviewLabel]] = {}
    labels = ReviewLabel.objects.filter(run_id=run_id).select_related("event", "created_by")
    for label in labels.order_by("-created_at", "-id"):
        if label.event is None:
            on_run.append(label)
        else:
            by_seq.setdefault(label.event.seq, []).append(label)
    return RunLabels(on_run=on_run, by_seq=by_seq)


def label_get(*, run_id: int, pk: int) -> ReviewLabel:
    """The label ``pk`` of run ``run_id`` (404 when it is not that run's)."""
    try:
        return ReviewLabel.objects.select_related("event").get(run_id=run_id, pk=pk)
    except ReviewLabel.DoesNotExist:
        raise Http404(f"No label {pk} on run {run_id}") from None


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


def review_flags(*, task) -> list:
    """The problems reviewers found in runs of ``task``, newest first (for the task page):
    every label but "no issue", each with the run it belongs to (and its message, whose run
    is the same: see :class:`ReviewLabel`)."""
    return list(
        # A message's label goes by the message's run (the same as the label's, held by
        # ReviewLabel's checks; said here too for rows written around them).
        ReviewLabel.objects.filter(Q(event__isnull=True, run__task=task) | Q(event__run__task=task))
        .exclude(category=ReviewLabel.Category.NO_ISSUE)
        .select_related("run", "event", "created_by")
        .order_by("-created_at", "-id")[:50]
    )

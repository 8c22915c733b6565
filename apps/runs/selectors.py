"""Reads of runs: the history, one run, its events; the task picker of the forms that
start one (run, race, play)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet
from django.http import Http404
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode

from apps.runs.groups import run_groups
from apps.runs.models import ReviewLabel, Run, RunEvent
from apps.tasks import selectors as task_selectors
from apps.tasks.cards import TaskCard, task_cards
from apps.tasks.models import Domain, Task
from apps.tasks.selectors import TaskFilters

# A reward at or above this counts as solved (τ² rewards are 0 or 1, stored as floats).
SOLVED = 0.999


# The history's kinds: what made a run. "single" (the default) is a model run of its own,
# fork or not; the races app adds "race" (apps.runs.groups), between evaluation and agent.
SINGLE, EVALUATION, AGENT, PLAY, ALL = "single", "evaluation", "agent", "play", "all"
# Older links said Run.Kind's values.
_KIND_ALIASES = {Run.Kind.MODEL: SINGLE, Run.Kind.HUMAN: PLAY}


def history_kinds() -> list[tuple[str, str]]:
    """The kind filter's choices, (value, label), the default first."""
    groups = [(g.name, g.label) for g in run_groups()]
    return [
        (SINGLE, "single runs"),
        (EVALUATION, "evaluation runs"),
        *groups,
        (AGENT, "agent runs (API)"),
        (PLAY, "play sessions"),
        (ALL, "every kind"),
    ]


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
    kind: str = ""  # one of history_kinds(); empty: every kind (the page says single)
    evaluation: str = ""  # an evaluation's id: its runs, one row each

    @classmethod
    def from_params(cls, params) -> RunFilters:
        return cls(**{name: (params.get(name) or "").strip()[:200] for name in cls.__annotations__})

    def as_query(self) -> dict[str, str]:
        return {k: v for k, v in vars(self).items() if v}

    def for_history(self) -> RunFilters:
        """These filters as the history page reads them: single runs unless they say
        another kind (or name an evaluation)."""
        if self.kind:
            return self
        return replace(self, kind=EVALUATION if self.evaluation else SINGLE)

    @property
    def history_kind(self) -> str:
        """The kind asked for: a known one, every kind when none is said (an
        evaluation's when one is named), single runs for one it does not know."""
        kind = _KIND_ALIASES.get(self.kind, self.kind)
        if not kind:
            return EVALUATION if self.evaluation else ALL
        return kind if kind in dict(history_kinds()) else SINGLE

    @property
    def evaluation_id(self) -> int | None:
        """The evaluation whose runs are asked for, if one is (and the kind is theirs)."""
        if self.history_kind == EVALUATION and self.evaluation.isdigit():
            return int(self.evaluation)
        return None

    @property
    def grouped(self) -> bool:
        """Evaluation runs are listed one row per evaluation, unless one is named."""
        return self.history_kind == EVALUATION and self.evaluation_id is None


def run_list(*, filters: RunFilters) -> QuerySet[Run]:
    """The team's runs, newest first, narrowed by ``filters`` (of its kind: every kind
    unless it says one; :meth:`RunFilters.for_history` says single runs)."""
    related = ["task", "created_by", *(r for g in run_groups() for r in g.related)]
    runs = (
        _narrowed(Run.objects.all(), filters=filters)
        .select_related(*related)
        .annotate(has_critical=labelled(severity=ReviewLabel.Severity.CRITICAL))
    )
    if filters.critical == "1":
        runs = runs.filter(has_critical=True)
    return runs.order_by("-created_at", "-id")


@dataclass(frozen=True)
class EvaluationRuns:
    """One evaluation's runs in the history, counted (its row when they are grouped)."""

    evaluation: Any  # apps.evaluations' Evaluation, read through Run.evaluation
    runs: int
    completed: int
    solved: int
    failed: int
    stopped: int
    going: int  # queued or running
    latest: datetime

    @property
    def others(self) -> int:
        return self.runs - self.completed - self.failed - self.stopped - self.going


def run_evaluation_groups(*, filters: RunFilters) -> QuerySet:
    """The evaluation runs ``filters`` keep, one row per evaluation (a dict of its id and
    counts, for :func:`evaluation_runs_of`), the latest run's evaluation first."""
    status = Run.Status
    runs = _narrowed(Run.objects.filter(evaluation__isnull=False), filters=filters)
    if filters.critical == "1":
        runs = runs.filter(labelled(severity=ReviewLabel.Severity.CRITICAL))
    return (
        runs.values("evaluation")
        .annotate(
            runs=Count("id"),
            completed=Count("id", filter=Q(status=status.COMPLETED)),
            solved=Count("id", filter=Q(status=status.COMPLETED, reward__gte=SOLVED)),
            failed=Count("id", filter=Q(status=status.FAILED)),
            stopped=Count("id", filter=Q(status=status.STOPPED)),
            going=Count("id", filter=Q(status__in=[status.QUEUED, status.RUNNING])),
            latest=Max("created_at"),
        )
        .order_by("-latest", "-evaluation")
    )


def evaluation_runs_of(rows) -> list[EvaluationRuns]:
    """``rows`` of :func:`run_evaluation_groups` with their evaluations (one query)."""
    rows = list(rows)
    # The evaluation model is the one Run.evaluation points at: the runs app never
    # imports the evaluations app (a higher layer).
    model = Run._meta.get_field("evaluation").related_model
    found = model.objects.select_related("created_by").in_bulk([r["evaluation"] for r in rows])
    return [
        EvaluationRuns(evaluation=found[r.pop("evaluation")], **r)
        for r in rows
        if r["evaluation"] in found
    ]


def _narrowed(runs: QuerySet[Run], *, filters: RunFilters) -> QuerySet[Run]:
    """``runs`` of ``filters``' kind, narrowed by its other fields (but ``critical``)."""
    kind = filters.history_kind
    groups = run_groups()
    if kind == SINGLE:
        runs = runs.filter(kind=Run.Kind.MODEL, evaluation__isnull=True)
        for group in groups:
            runs = runs.exclude(group.runs)
    elif kind == EVALUATION:
        runs = runs.filter(evaluation__isnull=False)
        if filters.evaluation_id is not None:
            runs = runs.filter(evaluation_id=filters.evaluation_id)
    elif kind == AGENT:
        runs = runs.filter(kind=Run.Kind.AGENT)
    elif kind == PLAY:
        runs = runs.filter(kind=Run.Kind.HUMAN)
    elif kind != ALL:
        (group,) = (g for g in groups if g.name == kind)
        runs = runs.filter(group.runs)
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
        runs = runs.filter(reward__gte=SOLVED)
    elif filters.reward == "0":
        runs = runs.filter(reward__lt=SOLVED)
    elif filters.reward == "none":
        runs = runs.filter(reward__isnull=True)
    if filters.category in ReviewLabel.Category.values:
        runs = runs.filter(labelled(category=filters.category))
    elif filters.category == "none":
        runs = runs.filter(~labelled())
    return runs


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


PICKER_SIZE = 50


@dataclass(frozen=True)
class TaskPicker:
    """The picker under the task field: the domain (with its splits for the split list),
    the split listed, what was typed, the first matching tasks (and their cards: what
    tells them apart) and how many match."""

    domain: Domain | None
    split: str
    q: str
    tasks: list[Task]
    count: int
    link_query: str  # the form's other choices, kept by the no-JS links of the list
    exact: bool = False  # what was typed is a task id of the domain (listed first)
    form_url: str = ""  # the form the no-JS links go back to (run, race, play)

    @property
    def cards(self) -> list[TaskCard]:
        return task_cards(self.tasks)


def _split_listed(domain: Domain, wanted: str, task_id: str) -> str:
    """``wanted`` if the domain has it; else the default split (or base, or the largest),
    preferring one that holds ``task_id`` when that names a task."""
    splits = [s.name for s in domain.splits.all()]  # largest first
    if wanted in splits:
        return wanted
    order = list(dict.fromkeys([settings.TAU2_SPLIT, "base", *splits]))
    order = [s for s in order if s in splits]
    if task_id:
        holding = set(
            Task.objects.filter(domain_id=domain.name, task_id=task_id).values_list(
                "splits__name", flat=True
            )
        )
        order = [s for s in order if s in holding] + order
    return order[0] if order else ""


def picker_form_url(value: str) -> str:
    """The form a picker's links lead back to: a path of this site, else the run form."""
    if value.startswith("/") and url_has_allowed_host_and_scheme(value, allowed_hosts=None):
        return value.split("?", 1)[0]
    return reverse("runs:new")


def task_picker(
    *, domain: str, split: str, q: str, keep: dict | None = None, form_url: str = ""
) -> TaskPicker:
    """The tasks of ``domain``/``split`` whose title, reason, id or tools contain every word
    of ``q`` (as on the explorer), in τ²'s order; the task whose id is ``q`` comes first,
    whatever its split. Its links lead back to ``form_url`` (default: the run form)."""
    form_url = picker_form_url(form_url)
    row = next((d for d in task_selectors.domain_list() if d.name == domain), None)
    if row is None:
        return TaskPicker(
            domain=None, split="", q=q, tasks=[], count=0, link_query="", form_url=form_url
        )
    split = _split_listed(row, split, q)
    matches = task_selectors.task_list(filters=TaskFilters(domain=row.name, split=split, q=q))
    tasks = list(task_selectors.task_card_fields(matches)[:PICKER_SIZE])
    count = matches.count()
    exact = task_selectors.task_card_fields(Task.objects.filter(domain=row, task_id=q)).first()
    if exact is not None:
        tasks = [exact, *(t for t in tasks if t.pk != exact.pk)][:PICKER_SIZE]
        count += 0 if matches.filter(pk=exact.pk).exists() else 1
    link = {"domain": row.name, "split": split, **{k: v for k, v in (keep or {}).items() if v}}
    return TaskPicker(
        domain=row,
        split=split,
        q=q,
        tasks=tasks,
        count=count,
        link_query=urlencode(link),
        exact=exact is not None,
        form_url=form_url,
    )

"""The team's review of runs, in one place: labels on a run or on one of its messages
(category, severity, note), the queue of runs nobody has looked at yet, and the flags a
task page shows. The pages are ``apps/runs/views/review.py``; the task page's panel is
the ``{% task_review_flags %}`` tag (``templatetags/run_review.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.http import Http404

from apps.accounts.access import can_delete_label, can_review
from apps.runs.models import ReviewLabel, Run, RunEvent
from apps.runs.selectors import SOLVED, labelled

# --- writes -------------------------------------------------------------------------


def label_create(
    *,
    run: Run,
    by,
    category: str,
    severity: str,
    note: str = "",
    event: RunEvent | None = None,
) -> ReviewLabel:
    """Label ``run``, or its message ``event``, as ``by``; returns the saved label.

    Raises ``PermissionDenied`` unless ``by`` may review (``can_review``), and
    ``ValidationError`` for an event of another run or a critical "no issue"
    (``ReviewLabel.clean``; PostgreSQL's composite foreign key backs the first).
    """
    if not can_review(by):
        raise PermissionDenied("Only reviewers may label runs.")
    label = ReviewLabel(
        run=run, event=event, category=category, severity=severity, note=note, created_by=by
    )
    label.full_clean()
    label.save()
    return label


def label_delete(*, label: ReviewLabel, by) -> None:
    """Delete ``label``: its author or staff only (``PermissionDenied`` otherwise)."""
    if not can_delete_label(by, author_id=label.created_by_id):
        raise PermissionDenied("Only the label's author or staff may delete it.")
    label.delete()


# --- reads --------------------------------------------------------------------------


def review_queue() -> QuerySet[Run]:
    """Finished runs nobody labelled yet (an auto-review's pending or dismissed findings
    are nobody's label): failures first (failed, or a reward below 1), then the rest;
    newest first within each. ``needs_look`` is 0 for a failure, 1 otherwise."""
    failure = Q(status=Run.Status.FAILED) | Q(reward__lt=SOLVED)
    return (
        Run.objects.filter(status__in=Run.FINAL)
        .filter(~labelled())
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
    labels = ReviewLabel.objects.filter(run_id=run_id).select_related(
        "event", "created_by", "decided_by", "auto_review"
    )
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


def review_flags(*, task) -> list:
    """The problems reviewers found in runs of ``task``, newest first (for the task page):
    every label but "no issue", each with the run it belongs to (and its message, whose run
    is the same: see :class:`ReviewLabel`)."""
    return list(
        # A message's label goes by the message's run (the same as the label's, held by
        # ReviewLabel's checks; said here too for rows written around them).
        ReviewLabel.objects.filter(Q(event__isnull=True, run__task=task) | Q(event__run__task=task))
        .filter(ReviewLabel.COUNTED)
        .exclude(category=ReviewLabel.Category.NO_ISSUE)
        .select_related("run", "event", "created_by")
        .order_by("-created_at", "-id")[:50]
    )

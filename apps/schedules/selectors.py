"""Reads of schedules."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from apps.schedules.models import EvaluationSchedule


def schedule_list_for(*, user, evaluation=None) -> QuerySet[EvaluationSchedule]:
    """The schedules ``user`` sees: their own, or everyone's for staff; ``evaluation``:
    only those repeating it."""
    rows = EvaluationSchedule.objects.select_related(
        "owner", "source", "last_evaluation", "periodic_task"
    )
    if not user.is_staff:
        rows = rows.filter(owner=user)
    if evaluation is not None:
        rows = rows.filter(source=evaluation)
    return rows


def schedule_get(*, pk: int) -> EvaluationSchedule:
    """The schedule ``pk`` (404 if there is none)."""
    try:
        return EvaluationSchedule.objects.select_related("owner", "periodic_task").get(pk=pk)
    except EvaluationSchedule.DoesNotExist:
        raise Http404(f"No schedule {pk}") from None

"""Celery tasks of schedules: thin, ids only."""

from __future__ import annotations

from celery import shared_task

from apps.schedules import services


@shared_task(name=services.TASK, ignore_result=True)
def repeat(schedule_id: int) -> int | None:
    """Beat's tick of schedule ``schedule_id``: start its repetition for this tick, once
    (the id of the evaluation started, or None)."""
    evaluation = services.schedule_repeat(schedule_id=schedule_id)
    return evaluation.pk if evaluation is not None else None

"""Celery tasks of evaluations: thin, ids only."""

from __future__ import annotations

from celery import shared_task

from apps.evaluations import services
from apps.runs import queue


@shared_task(name=queue.EVALUATIONS_DISPATCH, ignore_result=True)
def dispatch() -> list[int]:
    """Start what running evaluations may start (beat; also after every run of theirs)."""
    return services.evaluations_dispatch()

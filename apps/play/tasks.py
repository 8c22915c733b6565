"""Celery tasks of play sessions: thin, JSON, ids only (never a token). Queued through
``apps.runs.queue`` by name."""

from __future__ import annotations

from celery import shared_task

from apps.play import worker
from apps.runs import queue
from apps.runs.lifecycle import execution_id


@shared_task(name=queue.PLAY_CUSTOMER_TURN, acks_late=True, ignore_result=True)
def customer_turn(run_id: int, at: int) -> str:
    """The customer of play session ``run_id`` answers (asked when it had ``at`` messages)."""
    return worker.customer_turn(run_id=run_id, at=at, worker=execution_id())


@shared_task(name=queue.PLAY_SCORE, acks_late=True, ignore_result=True)
def score(run_id: int, at: int) -> str:
    """End and score play session ``run_id`` (asked when it had ``at`` messages)."""
    return worker.score(run_id=run_id, at=at, worker=execution_id())

"""Celery tasks of datasets: thin, JSON, ids only (never a token)."""

from __future__ import annotations

from celery import shared_task

from apps.datasets import services


@shared_task(name=services.PUSH_TASK, acks_late=True, ignore_result=True)
def push_dataset(push_id: int) -> str:
    """Push dataset push ``push_id`` to the Hub (claimed once; the token is read here)."""
    return services.dataset_push_execute(push_id=push_id)

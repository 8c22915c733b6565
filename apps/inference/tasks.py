"""Celery tasks of the model catalogue (JSON arguments only; this one takes none)."""

from __future__ import annotations

from celery import shared_task

from apps.inference.services import catalogue_refresh


@shared_task(name="apps.inference.tasks.refresh_catalogue", ignore_result=False)
def refresh_catalogue() -> dict:
    """Refresh the catalogue from the router; returns the :class:`RefreshReport` as a dict.

    Scheduled by beat (``CELERY_BEAT_SCHEDULE``). It never raises for a router that is
    down — the service keeps the stored catalogue and the next beat tick tries again —
    so there is nothing to retry here.
    """
    return catalogue_refresh().as_dict()

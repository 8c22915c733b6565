"""Reads of worker liveness: is any worker alive, and since when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import BooleanField, ExpressionWrapper, Q
from django.db.models.functions import Now
from django.utils import timezone

from apps.workers.models import WorkerBeat


@dataclass(frozen=True)
class Liveness:
    """Whether any worker is alive (a beat within ``TAU2_WORKER_ALIVE_SECONDS``, not
    stopped); ``since`` is when the oldest alive worker started, or — none alive — the
    last beat any worker wrote (``None`` when no worker ever beat)."""

    alive: bool
    since: datetime | None
    workers: int

    @property
    def message(self) -> str:
        """What a page says when no worker is alive (``""`` while one is)."""
        if self.alive:
            return ""
        if self.since is None:
            return "No worker is alive — runs wait."
        return f"No worker has been alive since {timezone.localtime(self.since):%H:%M} — runs wait."

    def as_json(self) -> dict:
        return {
            "alive": self.alive,
            "since": timezone.localtime(self.since).isoformat() if self.since else None,
            "workers": self.workers,
            "message": self.message,
        }


def workers_liveness(*, queue: str | None = None) -> Liveness:
    """The liveness of the workers consuming ``queue`` (default: the queue runs are sent
    to, ``CELERY_TASK_DEFAULT_QUEUE``; a worker of other queues runs none of them).

    One query over the rows (a row per worker, those gone for a day are deleted); whether
    a beat is recent is decided on the database's clock.
    """
    queue = queue or settings.CELERY_TASK_DEFAULT_QUEUE
    window = timedelta(seconds=settings.TAU2_WORKER_ALIVE_SECONDS)
    fresh = Q(stopped_at__isnull=True, last_beat__gte=Now() - window)
    rows = [
        row
        for row in WorkerBeat.objects.annotate(
            fresh=ExpressionWrapper(fresh, output_field=BooleanField())
        ).values("queues", "fresh", "started_at", "last_beat")
        if queue in row["queues"]
    ]
    alive = [row for row in rows if row["fresh"]]
    if alive:
        since = min(row["started_at"] for row in alive)
        return Liveness(alive=True, since=since, workers=len(alive))
    last = max((row["last_beat"] for row in rows), default=None)
    return Liveness(alive=False, since=last, workers=0)

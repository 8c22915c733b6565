"""Reads of worker liveness: is any worker alive, and since when."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Count, Max, Min
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


def workers_liveness() -> Liveness:
    """Two aggregate queries; the window is compared on the database's clock."""
    window = timedelta(seconds=settings.TAU2_WORKER_ALIVE_SECONDS)
    alive = WorkerBeat.objects.filter(stopped_at__isnull=True, last_beat__gte=Now() - window)
    now_alive = alive.aggregate(count=Count("pk"), since=Min("started_at"))
    if now_alive["count"]:
        return Liveness(alive=True, since=now_alive["since"], workers=now_alive["count"])
    last = WorkerBeat.objects.aggregate(last=Max("last_beat"))["last"]
    return Liveness(alive=False, since=last, workers=0)

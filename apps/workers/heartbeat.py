"""A worker's heartbeat: its ``WorkerBeat`` row renewed from a thread of its own.

Started when the worker is ready to take tasks and stopped when it shuts down
(``tau2site.celery`` connects Celery's signals to :func:`beat_start` and
:func:`beat_stop`). It writes to the database only, so it goes on while Redis is
away; a database that is away is tried again at the next beat.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.db.models import Max
from django.db.models.functions import Now

from apps.workers.models import WorkerBeat

logger = logging.getLogger(__name__)

# Rows of workers gone this long are deleted when a worker starts.
FORGET_AFTER = timedelta(days=1)


class Heartbeat:
    """Keeps the row of worker ``hostname`` (Celery's node name) beating every
    ``TAU2_WORKER_BEAT_SECONDS`` until :meth:`stop`.

    Once ``first_beat`` is set, ``started_at`` is the first beat's time and
    ``previous_beat`` the last beat of the worker's previous incarnation (the same node
    name: a restarted process) or ``None``, both on the database's clock.
    """

    def __init__(self, *, hostname: str, queues: list[str]) -> None:
        self.hostname, self.queues = hostname, sorted(queues)
        self.previous_beat: datetime | None = None
        self.started_at: datetime | None = None
        self.first_beat = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-beat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and mark the row stopped (pages say so at once, not a window later)."""
        self._stop.set()
        self._thread.join(timeout=settings.TAU2_WORKER_BEAT_SECONDS + 5)
        try:
            WorkerBeat.objects.filter(hostname=self.hostname, pid=os.getpid()).update(
                last_beat=Now(), stopped_at=Now()
            )
        except DatabaseError:  # it just stops beating, and is not alive a window later
            logger.warning("Worker %s: could not mark its row stopped", self.hostname)
        finally:
            close_old_connections()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    if self.first_beat.is_set():
                        self._beat()
                    else:
                        self._announce()
                        self.first_beat.set()
                except DatabaseError:
                    logger.warning("Worker %s: could not write its heartbeat", self.hostname)
                    close_old_connections()  # a broken connection goes; the next beat opens one
                except Exception:  # a beat that stops for good would read as a dead worker
                    logger.exception("Worker %s: heartbeat failed", self.hostname)
                self._stop.wait(settings.TAU2_WORKER_BEAT_SECONDS)
        finally:
            close_old_connections()

    def _announce(self) -> None:
        """The first beat: remember the previous incarnation's last beat, take its row."""
        self.previous_beat = (
            WorkerBeat.objects.filter(hostname=self.hostname)
            .values_list("last_beat", flat=True)
            .first()
        )
        fields = {"pid": os.getpid(), "queues": self.queues, "stopped_at": None}
        now = {"started_at": Now(), "last_beat": Now()}
        if not WorkerBeat.objects.filter(hostname=self.hostname).update(**fields, **now):
            WorkerBeat.objects.create(hostname=self.hostname, **fields, **now)
        self.started_at = (
            WorkerBeat.objects.filter(hostname=self.hostname)
            .values_list("started_at", flat=True)
            .first()
        )
        forget = WorkerBeat.objects.aggregate(newest=Max("last_beat"))["newest"]
        if forget is not None:
            WorkerBeat.objects.filter(last_beat__lt=forget - FORGET_AFTER).delete()

    def _beat(self) -> None:
        pid = os.getpid()
        if not WorkerBeat.objects.filter(hostname=self.hostname, pid=pid).update(
            last_beat=Now(), stopped_at=None
        ):
            # The row was taken by a process under the same name (a misconfigured
            # duplicate) or deleted: take it back, as at the first beat.
            self._announce()


_lock = threading.Lock()
_current: Heartbeat | None = None


def beat_start(*, hostname: str, queues: list[str]) -> Heartbeat:
    """Start this process's heartbeat as worker ``hostname`` (once; later calls return
    the running one)."""
    global _current
    with _lock:
        if _current is None:
            _current = Heartbeat(hostname=hostname, queues=queues).start()
        return _current


def beat_stop() -> None:
    """Stop this process's heartbeat, if it beats."""
    global _current
    with _lock:
        current, _current = _current, None
    if current is not None:
        current.stop()

"""A Celery worker inside the web process, for the one-command laptop setup.

With no REDIS_URL the broker is kombu's in-memory transport, which only reaches
consumers in the same process; this starts one there, on a daemon thread with a
thread pool, when the ASGI application starts. Production runs real workers
(``celery -A tau2site worker``) and never starts this.

Once ready it says so as ``celery worker`` does (Celery's ``worker_ready``), so it beats
and runs the start-up recovery like any worker (``tau2site.celery``).

Beat runs beside it, on a thread of the same process (Celery's embedded beat service,
threaded: a beat process of its own could not reach an in-memory broker), with the
database scheduler production's beat uses: the periodic jobs and people's evaluation
schedules (``apps.schedules``) tick on a laptop too.
"""

from __future__ import annotations

import logging
import threading

from celery import signals
from celery.beat import EmbeddedService
from celery.worker import WorkController
from django.conf import settings

from tau2site.celery import app

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_worker = None
_beat = None


class EmbeddedWorker(WorkController):
    """A plain WorkController that sends ``worker_ready`` once its consumer is ready, as
    ``celery.apps.worker.Worker`` (``celery worker``'s) does."""

    def on_consumer_ready(self, consumer) -> None:
        signals.worker_ready.send(sender=consumer)


def start() -> bool:
    """Start the in-process worker, and beat beside it, once. Returns True if one is
    running after the call."""
    global _worker, _beat
    if not settings.TAU2_EMBEDDED_WORKER:
        return False
    with _lock:
        if _worker is not None:
            return True
        _worker = EmbeddedWorker(
            app=app,
            pool="threads",
            concurrency=settings.TAU2_EMBEDDED_WORKER_CONCURRENCY,
            # Its liveness row's name: a restarted web process takes over its row, and
            # recovers the runs it held once their leases run out (tau2site.celery).
            hostname="embedded@localhost",
            queues=[settings.CELERY_TASK_DEFAULT_QUEUE],
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        threading.Thread(target=_worker.start, name="celery-embedded", daemon=True).start()
        _beat = EmbeddedService(app, thread=True)
        _beat.start()
        logger.info(
            "Embedded Celery worker started (%s threads); set REDIS_URL to use real workers",
            settings.TAU2_EMBEDDED_WORKER_CONCURRENCY,
        )
        return True


def stop() -> None:
    global _worker, _beat
    with _lock:
        if _beat is not None:
            _beat.stop()
            _beat = None
        if _worker is not None:
            _worker.stop(in_sighandler=False)
            _worker = None

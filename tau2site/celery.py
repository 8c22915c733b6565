"""The Celery application: `celery -A tau2site worker` and `celery -A tau2site beat`.

JSON only (never pickle), and tasks take ids, never tokens or whole objects.

Every worker, once ready (Celery's ``worker_ready``; the embedded worker sends it too):

* beats: its ``apps.workers`` row, renewed until it shuts down, says it is alive;
* recovers without waiting for the queue (:class:`StartupRecovery`): it runs beat's reap
  and dispatch itself, so runs left ``running`` under an expired lease while no worker
  was alive, or whose messages Redis lost, go on as soon as a worker is back.
"""

from __future__ import annotations

import logging
import os
import threading

from celery import Celery, signals
from django.conf import settings
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tau2site.settings")

logger = logging.getLogger(__name__)

app = Celery("tau2site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# The start-up passes run what these beat entries send (settings.CELERY_BEAT_SCHEDULE).
RECOVERY_ENTRIES = ("runs-reap", "evaluations-dispatch", "evaluations-jobs-reap")


@app.task(name="tau2site.ping")
def ping() -> str:
    """Answers "pong": lets health checks and tests see a worker take a task."""
    return "pong"


class StartupRecovery(threading.Thread):
    """A worker's start-up recovery: beat's reap, then its evaluations' dispatch, run here
    (in-process, the tasks called by name), not sent through the broker.

    The reap re-queues every model run whose lease expired — its worker died, or none was
    alive — and sends again queued runs whose message was lost; the dispatch then hands
    running evaluations their next runs. A database that is away is tried again every
    beat until the pass succeeds. When this worker's previous incarnation (the same node
    name: a restarted process, as a container's is) was alive less than a lease ago, the
    runs it held may still be under their leases, so a second pass runs once those have
    run out — with no beat running, nothing else would take them.
    """

    def __init__(self, *, heartbeat, stopping: threading.Event) -> None:
        super().__init__(name="startup-recovery", daemon=True)
        self.heartbeat, self.stopping = heartbeat, stopping

    def run(self) -> None:
        try:
            # The previous incarnation's last beat is known once this one's row is written.
            while not self.heartbeat.first_beat.wait(1.0):
                if self.stopping.is_set():
                    return
            self._pass_until_done()
            wait = self._leases_left()
            if wait > 0 and not self.stopping.wait(wait):
                self._pass_until_done()
        finally:
            close_old_connections()

    def _leases_left(self) -> float:
        """Seconds until every lease the previous incarnation may hold has run out, or 0:
        a lease after the last moment it may have been alive (its last beat and a window)."""
        previous, started = self.heartbeat.previous_beat, self.heartbeat.started_at
        if previous is None or started is None:
            return 0.0
        end = settings.TAU2_WORKER_ALIVE_SECONDS + settings.TAU2_RUN_LEASE_SECONDS
        return max(0.0, end - (started - previous).total_seconds())

    def _pass_until_done(self) -> None:
        schedule = settings.CELERY_BEAT_SCHEDULE
        while not self.stopping.is_set():
            try:
                results = {
                    entry: app.tasks[schedule[entry]["task"]].apply(throw=True).result
                    for entry in RECOVERY_ENTRIES
                }
            except Exception:
                logger.warning("Start-up recovery failed; trying again", exc_info=True)
                close_old_connections()
                self.stopping.wait(settings.TAU2_WORKER_BEAT_SECONDS)
                continue
            logger.info(
                "Start-up recovery: runs re-queued %s, evaluation runs dispatched %s",
                results["runs-reap"],
                results["evaluations-dispatch"],
            )
            return


@signals.worker_ready.connect
def _worker_ready(sender, **kwargs) -> None:
    """``sender`` is the worker's consumer: its node name and queues name the row."""
    # The workers app's models: this module is imported with the settings, before Django
    # is set up, and a worker is ready only once it is.
    from apps.workers import heartbeat

    beat = heartbeat.beat_start(
        hostname=sender.hostname, queues=list(sender.app.amqp.queues.consume_from)
    )
    stopping = threading.Event()
    StartupRecovery(heartbeat=beat, stopping=stopping).start()

    def stop(**kwargs) -> None:
        stopping.set()
        heartbeat.beat_stop()

    signals.worker_shutdown.connect(stop, weak=False, dispatch_uid=f"worker-beat-{id(beat)}")

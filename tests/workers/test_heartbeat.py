"""Rows written by real ``celery worker`` processes: a worker beats from ready until it
stops; killed, it is not alive one window later; restarted under its node name, it takes
its row back; stopped gracefully, it is gone at once."""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.test import Client
from django.utils import timezone

from apps.workers.models import WorkerBeat
from tests.support import processes
from tests.workers.conftest import start_worker, wait_until

pytestmark = pytest.mark.slow

BEAT, ALIVE = 1.0, 4.0  # quicker than production's 5 s and 15 s; the same rule


@pytest.fixture
def quick_beats(settings):
    """The window the web side reads, for workers beating every BEAT seconds."""
    settings.TAU2_WORKER_BEAT_SECONDS = BEAT
    settings.TAU2_WORKER_ALIVE_SECONDS = ALIVE
    return {"TAU2_WORKER_BEAT_SECONDS": str(BEAT)}


def health() -> tuple[int, dict]:
    response = Client().get("/health/workers")
    return response.status_code, response.json()


def test_a_worker_beats_until_killed_and_a_restart_takes_its_row_back(
    own_queue, quick_beats, scripted_llm_session
):
    assert health()[0] == 503
    worker = start_worker(scripted_llm_session, queue=own_queue, name="beating", **quick_beats)
    try:
        row = wait_until(
            lambda: WorkerBeat.objects.filter(hostname=worker.node).first(),
            timeout=30,
            what="the worker's first beat",
        )
        assert (row.pid, row.queues, row.stopped_at) == (worker.pid, [own_queue], None)
        wait_until(
            lambda: WorkerBeat.objects.get(hostname=worker.node).last_beat > row.last_beat,
            timeout=10 * BEAT,
            what="a second beat",
        )
        assert health() == (
            200,
            {
                "alive": True,
                "since": timezone.localtime(row.started_at).isoformat(),
                "workers": 1,
                "message": "",
            },
        )

        os.kill(worker.pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
        killed = time.monotonic()
        wait_until(lambda: health()[0] == 503, timeout=ALIVE + 10, what="the worker to be gone")
        assert time.monotonic() - killed <= ALIVE + 10
        last = WorkerBeat.objects.get(hostname=worker.node)
        assert last.stopped_at is None  # killed: it just stopped beating
        at = timezone.localtime(last.last_beat)
        assert health()[1]["message"] == f"No worker has been alive since {at:%H:%M} — runs wait."
    finally:
        processes.stop(worker)

    again = start_worker(scripted_llm_session, queue=own_queue, name="beating", **quick_beats)
    try:
        assert again.node == worker.node
        taken = wait_until(
            lambda: WorkerBeat.objects.filter(hostname=again.node, pid=again.pid).first(),
            timeout=30,
            what="the restarted worker's first beat",
        )
        assert taken.pk == last.pk and taken.started_at > last.last_beat
        assert WorkerBeat.objects.filter(queues__contains=[own_queue]).count() == 1
        assert health()[0] == 200
    finally:
        processes.stop(again)  # SIGTERM: a warm shutdown

    stopped = WorkerBeat.objects.get(hostname=again.node)
    assert stopped.stopped_at is not None
    assert health()[0] == 503  # at once, not a window later

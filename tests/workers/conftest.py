"""Worker liveness on the production path: rows written by real worker processes, or
stored by a test with the ages it needs.

``own_queue`` gives each test a queue of its own and makes it the one runs go to: the
liveness a test reads is then only that of the workers it started or the rows it wrote
(the session's worker, when one is up, consumes another queue).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db.models.functions import Now

from apps.workers.models import WorkerBeat
from tests.support import processes


@pytest.fixture
def own_queue(committed_db, settings):
    name = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-workers-{uuid.uuid4().hex[:8]}"
    settings.CELERY_TASK_DEFAULT_QUEUE = name
    yield name
    WorkerBeat.objects.filter(queues__contains=[name]).delete()


def beat_row(
    *,
    queue: str,
    hostname: str,
    beat_ago: timedelta = timedelta(0),
    started_ago: timedelta = timedelta(hours=1),
    stopped: bool = False,
) -> WorkerBeat:
    """A worker's row whose last beat was ``beat_ago`` ago, on the database's clock."""
    row = WorkerBeat.objects.create(
        hostname=hostname,
        pid=4242,
        queues=[queue],
        started_at=Now() - started_ago,
        last_beat=Now() - beat_ago,
        stopped_at=Now() - beat_ago if stopped else None,
    )
    row.refresh_from_db()
    return row


def wait_until(predicate: Callable, *, timeout: float, what: str):
    """Poll ``predicate`` until it returns something true (returned); fail on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.1)


def start_worker(llm, *, queue: str, name: str, **extra: str) -> processes.Process:
    """A ``celery worker`` process on ``queue`` (runs sent to it too), once it answers."""
    env = processes.environment(llm=llm, extra={"CELERY_QUEUE": queue, **extra})
    worker = processes.start_worker(env, queue=queue, name=name)
    try:
        processes.wait_until_up(worker)
    except BaseException:
        processes.stop(worker)
        raise
    return worker

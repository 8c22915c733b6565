"""A worker killed mid-run (kill -9): no run stays "running", and no turn is recorded twice."""

import os
import signal

import pytest

from apps.runs.lifecycle import runs_reap
from apps.runs.models import Run
from apps.runs.tasks import execute_run
from tests.conftest import start_celery_worker, stop_celery_worker
from tests.runs.conftest import finished, gold_script, wait_for
from tests.support.scripts import GOLD_CALLS, queued_run

pytestmark = pytest.mark.slow


@pytest.fixture
def doomed_worker(scripted_llm_session, settings):
    """A second worker, on a queue of its own, holding runs under a 3 s lease."""
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-doomed"
    proc = start_celery_worker(
        llm=scripted_llm_session,
        queue=queue,
        name="doomed",
        extra_env={"TAU2_RUN_LEASE_SECONDS": "3"},
    )
    yield proc, queue
    if proc.poll() is None:
        stop_celery_worker(proc)


def test_a_killed_workers_run_resumes_elsewhere_from_its_stored_history(
    celery_worker, doomed_worker, llm_server, alice
):
    proc, queue = doomed_worker
    gold_script(llm_server, delay=0.6)
    run = queued_run(alice)
    execute_run.apply_async(args=[run.pk], queue=queue)
    wait_for(run, lambda r: r.events.count() >= 3, what="the doomed worker's first events")
    held_by = Run.objects.get(pk=run.pk).worker

    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)

    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.worker == held_by
    stored_before = run.events.count()
    wait_for(run, lambda r: runs_reap() == [r.pk], timeout=15, what="the lease to run out")

    run = wait_for(run, finished)
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    assert run.attempts == 2 and run.worker != held_by
    events = list(run.events.order_by("seq"))
    assert [e.seq for e in events] == list(range(len(events)))
    assert len(events) >= stored_before
    calls = [c["name"] for e in events for c in (e.message.get("tool_calls") or [])]
    assert calls == [name for name, _ in GOLD_CALLS]  # each turn exactly once


def test_a_run_whose_workers_keep_dying_fails_with_the_reason(committed_db, alice, settings):
    from datetime import timedelta

    from django.utils import timezone

    run = queued_run(alice)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        worker="gone:1",
        attempts=settings.TAU2_RUN_MAX_ATTEMPTS,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        started_at=timezone.now(),
    )
    assert runs_reap() == []
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert "stopped 3 times" in run.error


def test_two_workers_cannot_both_claim_a_run(committed_db, alice):
    from apps.runs.lifecycle import run_claim

    run = queued_run(alice)
    assert run_claim(run_id=run.pk, worker="w1") is not None
    assert run_claim(run_id=run.pk, worker="w2") is None
    assert Run.objects.get(pk=run.pk).worker == "w1"


def test_a_stopped_run_whose_worker_died_ends_stopped(committed_db, alice):
    from datetime import timedelta

    from django.utils import timezone

    run = queued_run(alice)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        worker="gone:1",
        attempts=1,
        stop_requested=True,
        lease_expires_at=timezone.now() - timedelta(seconds=1),
        started_at=timezone.now(),
    )
    assert runs_reap() == []
    run.refresh_from_db()
    assert run.status == Run.Status.STOPPED and run.finished_at is not None


def test_a_queued_run_whose_message_was_lost_is_sent_again(
    celery_worker, llm_server, alice, settings
):
    """Redis restarted without persistence loses the messages waiting in its queue; the
    reaper sends a run again once it waited a lease unclaimed, and only once a lease."""
    from datetime import timedelta

    from django.utils import timezone

    gold_script(llm_server)
    run = queued_run(alice)  # queued, and no message ever sent: as if Redis lost it
    Run.objects.filter(pk=run.pk).update(dispatched_at=timezone.now())
    assert runs_reap() == []  # handed to the queue just now: a worker may still take it

    lost_at = timezone.now() - timedelta(seconds=settings.TAU2_RUN_LEASE_SECONDS + 1)
    Run.objects.filter(pk=run.pk).update(dispatched_at=lost_at)
    assert runs_reap() == [run.pk]
    assert runs_reap() == []

    run = wait_for(run, finished)
    assert run.status == Run.Status.COMPLETED and run.reward == 1.0
    assert run.attempts == 1

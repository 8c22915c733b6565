"""A worker's start-up recovery (tau2site.celery.StartupRecovery), with no beat running:
what was left waiting while no worker was alive goes on once one starts."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.evaluations import services as evaluation_services
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from apps.runs.tasks import execute_run
from tests.support import processes
from tests.support.scripts import (
    AGENT_MODEL,
    GOLD_CALLS,
    finished,
    gold_script,
    queued_run,
    wait_for,
)
from tests.workers.conftest import start_worker, wait_until

pytestmark = pytest.mark.slow


def held_by(worker: processes.Process) -> str:
    """How ``lifecycle.execution_id`` names what this worker process holds."""
    return f":{worker.pid}:"


def test_a_run_left_running_under_an_expired_lease_completes_once_a_worker_starts(
    own_queue, llm_server, alice
):
    gold_script(llm_server)
    run = queued_run(alice)
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.RUNNING,
        worker="gone-host:1:00000000",
        attempts=1,
        lease_expires_at=timezone.now() - timedelta(minutes=10),
        started_at=timezone.now() - timedelta(minutes=11),
    )

    worker = start_worker(llm_server, queue=own_queue, name="recovering")
    try:
        run = wait_for(run, finished, timeout=90, what="the run to be resumed and end")
    finally:
        processes.stop(worker)

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    assert held_by(worker) in run.worker


def test_an_evaluation_whose_runs_nobody_handed_out_goes_on_once_a_worker_starts(
    own_queue, llm_server, alice, settings
):
    gold_script(llm_server)
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0  # the dispatch at creation hands out nothing
    evaluation = evaluation_services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=evaluation_services.TaskChoice(domain="airline", task_ids=["27"]),
        num_trials=2,
    )
    assert not evaluation.runs.filter(dispatched_at__isnull=False).exists()

    worker = start_worker(llm_server, queue=own_queue, name="dispatching")
    try:
        wait_until(
            lambda: Evaluation.objects.get(pk=evaluation.pk).status != Evaluation.Status.RUNNING,
            timeout=120,
            what="the evaluation to end",
        )
    finally:
        processes.stop(worker)

    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.COMPLETED
    runs = list(evaluation.runs.all())
    assert [r.status for r in runs] == [Run.Status.COMPLETED] * 2
    assert all(held_by(worker) in r.worker for r in runs)


def test_a_restarted_worker_resumes_what_its_killed_incarnation_held_once_the_lease_ends(
    own_queue, llm_server, alice
):
    """A container's worker restarts under its node name; its old leases still hold when
    it is ready, so its first pass leaves them, and its second takes them once they end."""
    gold_script(llm_server, delay=0.6)
    lease = {"TAU2_RUN_LEASE_SECONDS": "30", "TAU2_WORKER_BEAT_SECONDS": "1"}
    worker = start_worker(llm_server, queue=own_queue, name="restarting", **lease)
    run = queued_run(alice)
    try:
        execute_run.apply_async(args=[run.pk], queue=own_queue)
        wait_for(run, lambda r: r.events.count() >= 3, what="the first worker's first events")
    finally:
        os.kill(worker.pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
    killed_holder = Run.objects.get(pk=run.pk).worker
    assert held_by(worker) in killed_holder

    again = start_worker(llm_server, queue=own_queue, name="restarting", **lease)
    try:
        assert again.node == worker.node
        still = Run.objects.get(pk=run.pk)
        assert (still.status, still.worker) == (Run.Status.RUNNING, killed_holder)
        run = wait_for(run, finished, timeout=120, what="the run to be resumed and end")
    finally:
        processes.stop(again)

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    assert held_by(again) in run.worker
    events = list(run.events.order_by("seq"))
    assert [e.seq for e in events] == list(range(len(events)))
    calls = [c["name"] for e in events for c in (e.message.get("tool_calls") or [])]
    # Each turn exactly once: the gold conversation's calls (τ² 0.2's airline/27 has the
    # certificate sent, 1.x's has none).
    assert calls == [name for name, _ in GOLD_CALLS]

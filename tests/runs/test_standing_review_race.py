"""A standing review (``tau2 run --auto-review`` for an evaluation: every run, now and as
each ends) queues each run once, also when a run ends while the "now" sweep is under
way: its settled hook and the sweep may both pick it, in either order; the database
keeps one. Real PostgreSQL transactions, the hook in a thread of its own (its own
connection). alice owns the runs; stella (``staff``) asks for the review."""

from __future__ import annotations

import threading
import time

from django.db import connection, connections

from apps.connections.llm_routes import route_resolve
from apps.runs import autoreview, queue
from apps.runs.models import AutoReview, Run, RunEvent
from tests.support.evaluations import stored_evaluation
from tests.support.scripts import AGENT_MODEL


def _evaluation_with_messages(alice):
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0]})
    for run in evaluation.runs.all():
        RunEvent.objects.bulk_create(
            RunEvent(run=run, seq=seq, kind="agent", message={"role": "assistant", "content": "hi"})
            for seq in range(2)
        )
    Run.objects.filter(evaluation=evaluation).update(n_messages=2)
    return evaluation


class _RunEnds(threading.Thread):
    """The run's end as another process sees it: its settled hook on a connection of its
    own, whose backend ``pid`` it says before it starts."""

    def __init__(self, run: Run) -> None:
        super().__init__(name="run-ends")
        self.run_id = run.pk
        self.pid: int | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = cursor.fetchone()[0]
            self.ready.set()
            autoreview.run_settled_review(Run.objects.get(pk=self.run_id))
        finally:
            self.ready.set()
            connections.close_all()


def _waits_on_a_lock(pid: int, seconds: float = 20.0) -> bool:
    """Whether backend ``pid`` comes to wait for a lock (another transaction's row under
    the unique index) within ``seconds``. pg_locks, not pg_stat_activity: the latter is
    a snapshot frozen for the rest of the asking transaction."""
    deadline = time.monotonic() + seconds
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
            if cursor.fetchone()[0]:
                return True
            time.sleep(0.02)
    return False


def _sweep_racing(monkeypatch, *, staff, evaluation, racer: Run, hook_first: bool):
    """Ask for the standing review while ``racer`` ends in the middle of the sweep: its
    hook commits before the sweep queues it (``hook_first``), or runs after the sweep
    queued it, waiting on the sweep's open transaction. Returns the sweep's reviews and
    the ids sent to workers."""
    sent: list[int] = []
    monkeypatch.setattr(queue, "autoreview_enqueue", sent.append)
    original = autoreview._queued
    seen = {"hook": None}

    sweeper = threading.current_thread()

    def queued(*, run, **kwargs):
        if run.pk != racer.pk or threading.current_thread() is not sweeper:
            return original(run=run, **kwargs)
        if hook_first:
            ends = _RunEnds(racer)
            ends.start()
            ends.join(timeout=30)
            return original(run=run, **kwargs)
        review = original(run=run, **kwargs)  # in the sweep's transaction, not committed
        ends = seen["hook"] = _RunEnds(racer)
        ends.start()
        assert ends.ready.wait(timeout=30) and ends.pid is not None
        assert _waits_on_a_lock(ends.pid), "the run's hook did not wait for the sweep's row"
        return review

    monkeypatch.setattr(autoreview, "_queued", queued)
    reviewer = route_resolve(AGENT_MODEL, user=staff)
    reviews = autoreview.autoreviews_request(
        evaluation_id=evaluation.pk, by=staff, reviewer=reviewer, which=autoreview.WHICH_EACH
    )
    if seen["hook"] is not None:
        seen["hook"].join(timeout=30)
        assert not seen["hook"].is_alive()
    return reviews, sent


def test_a_run_ending_during_the_sweep_whose_hook_commits_first_is_queued_once(
    monkeypatch, alice, staff
):
    evaluation = _evaluation_with_messages(alice)
    racer, other = evaluation.runs.order_by("pk")
    reviews, sent = _sweep_racing(
        monkeypatch, staff=staff, evaluation=evaluation, racer=racer, hook_first=True
    )

    (by_hook,) = AutoReview.objects.filter(run=racer)
    assert by_hook.standing and by_hook.pk not in {r.pk for r in reviews}
    assert [r.run_id for r in reviews] == [other.pk]  # the sweep went on past the refusal
    assert AutoReview.objects.filter(run=other).count() == 1
    assert sorted(sent) == sorted([by_hook.pk, reviews[0].pk])  # each sent to a worker once


def test_a_run_ending_after_the_sweep_queued_it_waits_for_the_sweep_and_is_queued_once(
    monkeypatch, alice, staff
):
    evaluation = _evaluation_with_messages(alice)
    racer, other = evaluation.runs.order_by("pk")
    reviews, sent = _sweep_racing(
        monkeypatch, staff=staff, evaluation=evaluation, racer=racer, hook_first=False
    )

    assert [r.run_id for r in reviews] == [racer.pk, other.pk]
    assert AutoReview.objects.filter(run=racer).count() == 1
    assert AutoReview.objects.filter(run=other).count() == 1
    assert sorted(sent) == sorted(r.pk for r in reviews)  # the hook sent none


def test_a_run_may_still_be_reviewed_again_on_request(alice, staff):
    """The one-per-run rule is the standing review's: staff asking again is not refused."""
    evaluation = _evaluation_with_messages(alice)
    run = evaluation.runs.order_by("pk").first()
    reviewer = route_resolve(AGENT_MODEL, user=staff)
    autoreview.autoreviews_request(
        evaluation_id=evaluation.pk, by=staff, reviewer=reviewer, which=autoreview.WHICH_EACH
    )
    again = autoreview.autoreview_request(run=run, by=staff, reviewer=reviewer)
    assert not again.standing
    assert AutoReview.objects.filter(run=run).count() == 2

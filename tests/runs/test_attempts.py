"""Attempts that mean what they say (issue 19, item 4).

Every claim is an attempt, and every time a started run is taken up again is a
resumption with its reason: a lost worker (its lease ran out and another worker took the
run over) counts against ``TAU2_RUN_MAX_ATTEMPTS``; a hand-back (the worker gave the run
back itself because PostgreSQL or Redis went away) does not. The run page lists them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis.exceptions
from django.db import OperationalError
from django.utils import timezone

from apps.runs.lifecycle import (
    infrastructure_reason,
    run_claim,
    run_hand_back,
    runs_reap,
)
from apps.runs.models import Run
from tests.support.scripts import queued_run

LOST = Run.Resumption.WORKER_LOST
DATABASE = Run.Resumption.DATABASE
BROKER = Run.Resumption.BROKER


@pytest.fixture(autouse=True)
def no_messages_sent(monkeypatch):
    """The reaper's re-queueing is what is tested here, not the broker: sent ids are kept."""
    sent = []
    monkeypatch.setattr("apps.runs.queue.run_enqueue", lambda run_id, **kwargs: sent.append(run_id))
    return sent


def _claim(run: Run, worker: str) -> Run:
    claimed = run_claim(run_id=run.pk, worker=worker)
    assert claimed is not None, f"{worker} could not claim run {run.pk}"
    return claimed


def _lose_worker(run: Run) -> None:
    """The holder vanished: its lease ran out without a heartbeat."""
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def _hand_back(run: Run, worker: str, exc: BaseException) -> None:
    run_hand_back(run=run, worker=worker, reason=infrastructure_reason(exc))


def test_a_database_or_broker_error_is_named_as_such():
    assert (
        infrastructure_reason(OperationalError("the database system is shutting down")) == DATABASE
    )
    assert infrastructure_reason(redis.exceptions.ConnectionError("Error 111")) == BROKER


def test_a_run_claimed_once_has_one_attempt_and_no_resumption(alice):
    run = _claim(queued_run(alice), "w1")
    assert (run.attempts, run.attempts_counted, run.resumptions) == (1, 1, [])


def test_a_hand_back_after_a_database_restart_is_recorded_and_does_not_count(alice):
    run = _claim(queued_run(alice), "w1")
    _hand_back(run, "w1", OperationalError("the database system is shutting down"))

    run.refresh_from_db()
    assert (run.status, run.worker, run.resumptions) == (Run.Status.QUEUED, "", [DATABASE])
    run = _claim(run, "w2")
    assert (run.attempts, run.attempts_counted) == (2, 1)


def test_a_hand_back_after_a_broker_restart_is_recorded_and_does_not_count(alice):
    run = _claim(queued_run(alice), "w1")
    _hand_back(run, "w1", redis.exceptions.ConnectionError("Connection closed by server."))
    run = _claim(run, "w2")
    assert (run.attempts, run.attempts_counted, run.resumptions) == (2, 1, [BROKER])


def test_a_worker_taking_over_an_expired_lease_records_a_lost_worker_that_counts(alice):
    run = _claim(queued_run(alice), "w1")
    _lose_worker(run)
    run = _claim(run, "w2")
    assert (run.worker, run.attempts, run.attempts_counted, run.resumptions) == (
        "w2",
        2,
        2,
        [LOST],
    )


def test_a_worker_that_lost_the_run_hands_nothing_back(alice):
    """Its lease ran out and another worker took over: its late hand-back changes nothing."""
    run = _claim(queued_run(alice), "w1")
    _lose_worker(run)
    _claim(run, "w2")
    _hand_back(run, "w1", OperationalError("server closed the connection unexpectedly"))
    run.refresh_from_db()
    assert (run.status, run.worker, run.resumptions) == (Run.Status.RUNNING, "w2", [LOST])


def test_a_reason_that_is_no_hand_back_is_refused(alice):
    run = _claim(queued_run(alice), "w1")
    with pytest.raises(ValueError, match="is not a hand-back"):
        run_hand_back(run=run, worker="w1", reason=LOST)


def test_one_lost_worker_and_a_database_restart_leave_the_run_two_more_lost_workers(
    alice, settings, no_messages_sent
):
    """The probe's case: lost once, handed back once, at attempts 3 — the old count failed
    it at the next lost worker as "stopped 3 times"."""
    assert settings.TAU2_RUN_MAX_ATTEMPTS == 3
    run = _claim(queued_run(alice), "w1")
    _lose_worker(run)
    assert runs_reap() == [run.pk]
    run = _claim(run, "w2")
    _hand_back(run, "w2", OperationalError("the database system is shutting down"))
    run = _claim(run, "w3")
    assert (run.attempts, run.attempts_counted) == (3, 2)

    _lose_worker(run)
    assert runs_reap() == [run.pk]  # lost twice: it goes on
    run = _claim(run, "w4")
    _lose_worker(run)
    assert runs_reap() == []  # lost three times: it fails, saying so

    run.refresh_from_db()
    assert run.resumptions == [LOST, DATABASE, LOST]
    assert (run.status, run.failure) == (Run.Status.FAILED, Run.Failure.INFRASTRUCTURE)
    assert run.error == (
        "The worker running it stopped 3 times (and was handed back 1 time after a database "
        "or broker restart, which does not count); giving up rather than leaving it running."
    )
    assert no_messages_sent == [run.pk, run.pk]


def test_hand_backs_alone_never_fail_a_run(alice, settings):
    run = _claim(queued_run(alice), "w0")
    for n in range(1, settings.TAU2_RUN_MAX_ATTEMPTS + 3):
        _hand_back(run, f"w{n - 1}", OperationalError("the database system is shutting down"))
        run = _claim(run, f"w{n}")
    _lose_worker(run)
    assert runs_reap() == [run.pk]
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    assert (run.attempts, run.attempts_counted) == (settings.TAU2_RUN_MAX_ATTEMPTS + 3, 1)


def test_a_retried_run_starts_again_with_no_resumptions(alice):
    """An evaluation's "retry the failed runs" queues a run again with attempts 0."""
    run = _claim(queued_run(alice), "w1")
    _lose_worker(run)
    _claim(run, "w2")
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.QUEUED, attempts=0, worker="", lease_expires_at=None
    )
    run = _claim(run, "w3")
    assert (run.attempts, run.attempts_counted, run.resumptions) == (1, 1, [])


def test_alice_sees_why_her_run_was_resumed(alice, alice_client):
    run = _claim(queued_run(alice), "w1")
    _lose_worker(run)
    run = _claim(run, "w2")
    _hand_back(run, "w2", OperationalError("the database system is shutting down"))
    _claim(run, "w3")

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-testid="resumptions"' in page
    assert "resumed twice: worker lost, database restart" in page


def test_a_run_taken_up_once_says_once_and_one_never_resumed_says_nothing(alice, alice_client):
    resumed = _claim(queued_run(alice), "w1")
    _hand_back(resumed, "w1", redis.exceptions.ConnectionError("Connection closed by server."))
    _claim(resumed, "w2")
    steady = _claim(queued_run(alice), "w3")

    assert (
        "resumed once: broker restart" in alice_client.get(f"/runs/{resumed.pk}/").content.decode()
    )
    assert (
        'data-testid="resumptions"' not in alice_client.get(f"/runs/{steady.pk}/").content.decode()
    )

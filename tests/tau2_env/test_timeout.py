"""``tau2 run --timeout`` in the engine: τ² 1.x's wall-clock limit of one conversation,
checked by τ²'s own ``Orchestrator._check_timeout`` after each hop (as its ``run()``
checks it), ended ``timeout`` and scored as τ² scores it; refused in words on τ² 0.2,
which has no --timeout.

The parity test makes the clock deterministic with a slow scripted provider: the agent's
first reply takes far longer than the timeout, everything before it far less. The others
set the clock back instead of sleeping (``elapsed``: a conversation resumed that long
after it started).
"""

from __future__ import annotations

import json

import pytest

from tau2_env.engine import catalog
from tau2_env.engine.episodes import Episode
from tau2_env.llm import gateway
from tests.support.llm_server import ScriptedLLM, delayed, text, tool_call
from tests.support.scripts import GOLD_TASK, is_agent_request
from tests.support.tau2_cli import tau2_cli_run

DOMAIN, TASK = GOLD_TASK
ARGS = {"temperature": 0}
OPENING = "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."


def _route(llm: ScriptedLLM, model: str) -> gateway.Route:
    return gateway.Route(
        provider="openai_compatible",
        model=model,
        base_url=llm.base_url,
        api_key="sk-scripted-not-a-key",
    )


def _episode(llm: ScriptedLLM, **kwargs) -> Episode:
    return Episode(
        domain=DOMAIN,
        task_id=TASK,
        user_llm=_route(llm, "scripted-customer"),
        agent_llm=_route(llm, "scripted-agent"),
        agent_llm_args=dict(ARGS),
        user_llm_args=dict(ARGS),
        max_steps=20,
        **{"seed": 300, **kwargs},
    )


def _slow_agent(llm: ScriptedLLM, *, agent_delay: float) -> None:
    """The customer opens at once; the agent's first reply takes ``agent_delay``
    seconds, every later one none; the customer stops once the agent has spoken."""

    def responder(request):
        if is_agent_request(request):
            if not any(m.get("role") == "tool" for m in request.messages):
                return delayed(
                    tool_call("get_user_details", user_id="ethan_martin_2396"), agent_delay
                )
            return text("You are not owed a certificate, I am sorry.")
        if any(
            m.get("role") == "user" and "certificate" in str(m.get("content"))
            for m in request.messages
        ):
            return text("Thanks. ###STOP###")
        return text(OPENING)

    llm.responder = responder


@pytest.mark.legacy_tau2
def test_it_refuses_a_timeout_in_words_on_tau2_0_2(llm_server):
    why = catalog.timeout_refusal(30.0)
    assert why is not None and "has no tau2 run --timeout" in why
    assert catalog.timeout_refusal(None) is None  # no timeout: as tau2 run without one
    with pytest.raises(ValueError, match="has no tau2 run --timeout"):
        _episode(llm_server, timeout=30.0)
    assert llm_server.chat_requests() == []  # refused before any call


@pytest.mark.upstream
@pytest.mark.parametrize(
    ("timeout", "why"),
    [(0.0, "more than 0"), (-1.0, "more than 0"), (float("nan"), "more than 0"), ("5", "number")],
)
def test_it_refuses_a_timeout_that_is_no_number_of_seconds(llm_server, timeout, why):
    assert why in catalog.timeout_refusal(timeout)
    with pytest.raises(ValueError, match=why):
        _episode(llm_server, timeout=timeout)


@pytest.mark.upstream
def test_a_conversation_past_its_timeout_ends_timeout_after_the_next_hop_and_scores_0(
    llm_server,
):
    _slow_agent(llm_server, agent_delay=0)
    # The clock set back: the conversation began 61 s ago, its timeout is 60 s. τ²
    # checks only after a hop, so the customer's opening is still said.
    episode = _episode(llm_server, timeout=60.0, elapsed=61.0)
    assert not episode.done
    assert episode.run() == "ended", episode.error
    assert episode.termination_reason.value == "timeout"
    assert [m.role for m in episode.messages] == ["assistant", "user"]
    assert len(llm_server.chat_requests()) == 1  # the customer's, then τ² ended it
    # Scored as τ²'s evaluator scores any ending but a stop.
    assert episode.reward_info.reward == 0.0
    assert "Termination reason: timeout" in episode.reward_info.info["note"]


@pytest.mark.upstream
def test_a_conversation_within_its_timeout_plays_to_its_end(llm_server):
    _slow_agent(llm_server, agent_delay=0)
    episode = _episode(llm_server, timeout=3600.0)
    assert episode.run() == "ended", episode.error
    assert episode.termination_reason.value == "user_stop"
    assert episode.timeout == 3600.0


@pytest.mark.upstream
def test_a_resumed_conversation_already_past_its_timeout_ends_as_it_is_rebuilt(llm_server):
    _slow_agent(llm_server, agent_delay=0)
    played = _episode(llm_server)
    assert played.run() == "ended", played.error
    history = played.messages_json()[:2]  # τ²'s greeting, the customer's opening
    llm_server.requests.clear()

    # Picked up again (another worker) 120 s after it started, with a 60 s timeout: τ²'s
    # limits are checked after the last stored hop, as for its step limit.
    resumed = _episode(llm_server, timeout=60.0, elapsed=120.0, messages=history)
    assert resumed.termination_reason.value == "timeout"
    assert resumed.run() == "ended"
    assert llm_server.chat_requests() == []
    assert resumed.reward_info.reward == 0.0
    # The same history within its timeout goes on.
    going = _episode(llm_server, timeout=60.0, elapsed=1.0, messages=history)
    assert going.termination_reason is None


@pytest.mark.upstream
@pytest.mark.slow
def test_an_episode_times_out_where_tau2_run_timeout_does(llm_server, tmp_path):
    """The agent's first reply takes 8 s, the timeout is 4 s: τ² ends the conversation
    right after that hop, before the tool call it asked for runs."""
    _slow_agent(llm_server, agent_delay=8.0)
    results = tau2_cli_run(
        tmp_path,
        domain=DOMAIN,
        task_ids=[TASK],
        seed=300,
        max_steps=20,
        agent_llm="openai/scripted-agent",
        user_llm="openai/scripted-customer",
        agent_args={**ARGS, "api_base": llm_server.base_url},
        user_args={**ARGS, "api_base": llm_server.base_url},
        timeout=4.0,
    )
    (simulation,) = json.loads(results.read_text())["simulations"]
    assert simulation["termination_reason"] == "timeout"
    cli = [r.body for r in llm_server.chat_requests()]
    llm_server.requests.clear()

    episode = _episode(llm_server, seed=simulation["seed"], timeout=4.0)
    assert episode.run() == "ended", episode.error
    ours = [r.body for r in llm_server.chat_requests()]

    assert len(cli) == 2  # the customer's opening, the agent's (slow) tool call
    assert ours == cli
    assert episode.termination_reason.value == simulation["termination_reason"]
    assert [m.role for m in episode.messages] == [m["role"] for m in simulation["messages"]]
    assert episode.reward_info.model_dump(mode="json") == simulation["reward_info"]
    assert simulation["reward_info"]["reward"] == 0.0

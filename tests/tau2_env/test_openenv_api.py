"""The OpenEnv API, through openenv's own client against the live ASGI server.

The simulated customer is the scripted LLM (``llm_server``): each test scripts what the
customer says and checks what the agent side sees over the WebSocket.
"""

from __future__ import annotations

import json

import pytest
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

from tau2_env import Tau2Env
from tau2_env.engine import episodes
from tau2_env.generations import tau2_generation
from tests.support.llm_server import error, text
from tests.support.threads import record_threads

SERVER_TOKEN = "hf_server_token_0000000000"
VISITOR_TOKEN = "hf_visitor_token_1111111111"


@pytest.fixture
def server_token(llm_server, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SERVER_TOKEN)
    return SERVER_TOKEN


async def test_the_original_spaces_quick_start_runs_verbatim(asgi_server, llm_server, server_token):
    llm_server.add(
        text("Hi, I'd like to cancel a reservation."),
        text("Sure, my user id is noah_muller_9847."),
    )
    from openenv.core.env_server.mcp_types import CallToolAction

    from tau2_env import Tau2Env

    async with Tau2Env(base_url=asgi_server.url) as env:
        result = await env.reset(task_id="2")
        print(result.observation.metadata["user_message"])  # the user's opening message
        policy = result.observation.metadata["policy"]  # what the agent must follow

        tools = await env.list_tools()
        reply = await env.call_tool(
            "respond_to_user", message="Happy to help. What's your user id?"
        )
        user = await env.call_tool("get_user_details", user_id="noah_muller_9847")

        # `call_tool` returns the tool's output only. `step` also returns whether the
        # episode is over and, once it is, the reward.
        result = await env.step(CallToolAction(tool_name="done", arguments={}))
        print(result.done, result.reward, result.observation.metadata["reward_info"])

    assert "airline" in policy.lower()
    assert {"respond_to_user", "done", "get_user_details"} <= {t.name for t in tools}
    assert reply == "Sure, my user id is noah_muller_9847."
    assert json.loads(user)["user_id"] == "noah_muller_9847"
    assert result.done is True
    # Nothing was cancelled: τ² 0.2's airline/2 expects a cancellation, 1.0.1's look-ups only.
    assert result.reward == (0.0 if tau2_generation() == "0.2" else 1.0)
    assert result.observation.metadata["reward_info"]["reward_basis"] == ["DB", "COMMUNICATE"]
    assert {r.token for r in llm_server.chat_requests()} == {SERVER_TOKEN}


async def test_reset_returns_the_opening_the_policy_and_the_task(
    asgi_server, llm_server, server_token
):
    llm_server.add(text("Hello, I need help with my order."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        result = await env.reset(domain="retail", split="test", seed=7)

    metadata = result.observation.metadata
    assert metadata["user_message"] == "Hello, I need help with my order."
    assert metadata["domain"] == "retail"
    assert metadata["split"] == "test"
    assert metadata["task_id"]
    assert "retail" in metadata["policy"].lower()
    assert result.done is False and result.reward is None


async def test_a_seed_picks_the_same_task_again(asgi_server, llm_server, server_token):
    llm_server.responder = lambda request: text("Hi.")
    async with Tau2Env(base_url=asgi_server.url) as env:
        first = (await env.reset(seed=123)).observation.metadata["task_id"]
        second = (await env.reset(seed=123)).observation.metadata["task_id"]
    assert first == second


async def test_list_tools_works_over_the_websocket_before_and_after_reset(
    asgi_server, llm_server, server_token
):
    llm_server.add(text("Hi, my phone has no service."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        before = await env.list_tools()
        await env.reset(domain="telecom", task_id=_first_task("telecom"))
        after = await env.list_tools(use_cache=False)

    before_names = {t.name for t in before}
    after_names = {t.name for t in after}
    assert {"get_user_details", "book_reservation", "respond_to_user", "done"} <= before_names
    assert {"get_customer_by_phone", "respond_to_user", "done"} <= after_names
    # The customer's phone tools are theirs, not the agent's.
    assert "toggle_airplane_mode" not in after_names
    booking = next(t for t in before if t.name == "book_reservation")
    assert booking.input_schema["type"] == "object"
    assert "user_id" in booking.input_schema["properties"]


async def test_a_tool_called_before_reset_gets_an_error_observation(asgi_server, llm_server):
    async with Tau2Env(base_url=asgi_server.url) as env:
        result = await env.step(CallToolAction(tool_name="get_user_details", arguments={}))
        said = await env.call_tool("respond_to_user", message="hello?")

    assert said.startswith("Error:") and "reset()" in said
    assert result.observation.error is not None
    assert "reset" in result.observation.error.message
    assert result.done is False
    assert llm_server.chat_requests() == []


async def test_bad_arguments_give_a_tool_error_and_the_episode_goes_on(
    asgi_server, llm_server, server_token
):
    llm_server.add(text("Hi, I want to change my flight."), text("My id is noah_muller_9847."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2")
        bad = await env.step(
            CallToolAction(tool_name="get_user_details", arguments={"no_such_arg": 1})
        )
        unknown = await env.call_tool("no_such_tool", x=1)
        empty = await env.call_tool("respond_to_user", message="")
        reply = await env.call_tool("respond_to_user", message="What's your user id?")

    assert bad.done is False
    assert bad.observation.result["is_error"] is True
    assert "no_such_arg" in bad.observation.result["data"]
    assert unknown.startswith("Error:")
    assert empty.startswith("Error:")
    assert reply == "My id is noah_muller_9847."


async def test_after_the_end_calls_say_so_and_the_score_stays(
    asgi_server, llm_server, server_token
):
    llm_server.add(text("Hi, I need help."), text("Thanks, bye! ###STOP###"))
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2")
        ended = await env.step(
            CallToolAction(tool_name="respond_to_user", arguments={"message": "Anything else?"})
        )
        after_tool = await env.step(
            CallToolAction(tool_name="get_user_details", arguments={"user_id": "x"})
        )
        after_done = await env.step(CallToolAction(tool_name="done", arguments={}))
        text_after = await env.call_tool("respond_to_user", message="Hello?")

    assert ended.done is True
    assert ended.observation.result["data"] == "Thanks, bye! ###STOP###"
    assert ended.observation.metadata["termination_reason"] == "user_stop"
    reward_info = ended.observation.metadata["reward_info"]
    for later in (after_tool, after_done):
        assert later.done is True
        assert later.reward == ended.reward
        assert later.observation.result["data"] == "The conversation has ended."
        assert later.observation.metadata["reward_info"] == reward_info
    assert text_after == "The conversation has ended."
    assert len(llm_server.chat_requests()) == 2  # nothing reached the customer afterwards


@pytest.mark.parametrize(
    ("status", "expected"), [(500, "HTTP 500"), (401, "credentials were refused")]
)
async def test_a_failed_customer_llm_call_ends_the_episode_without_a_score(
    asgi_server, llm_server, status, expected
):
    llm_server.add(
        text("Hi, I need to change a booking."),
        error(status, f"upstream says no to {VISITOR_TOKEN}"),
    )
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2", hf_token=VISITOR_TOKEN)
        result = await env.step(
            CallToolAction(tool_name="respond_to_user", arguments={"message": "How can I help?"})
        )
        state = await env.state()

    assert result.done is True
    assert result.reward is None
    assert "reward_info" not in result.observation.metadata
    reason = result.observation.metadata["error"]
    assert "customer could not answer" in reason and expected in reason
    assert result.observation.result["data"] == reason
    assert VISITOR_TOKEN not in json.dumps(result.observation.model_dump(mode="json"))
    assert VISITOR_TOKEN not in json.dumps(state.model_dump(mode="json"))
    # 401 is never retried; a 500 is not a rate limit either.
    assert len(llm_server.chat_requests()) == 2


async def test_the_tool_call_that_can_end_the_episode_is_made_and_scored_off_the_event_loop(
    asgi_server, llm_server, server_token, monkeypatch
):
    # Tool calls are answered on the event loop while they cannot end the episode; the
    # one that may reach τ²'s error limit runs in the episode pool, where it is scored.
    from tau2_env.config import DEFAULT_MAX_ERRORS

    where = record_threads(monkeypatch, episodes.Episode, "call_tool", "score")
    llm_server.add(text("Hi, I need help."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2")
        results = [
            await env.step(CallToolAction(tool_name="get_user_details", arguments={"user_id": n}))
            for n in (f"nobody_{i}" for i in range(DEFAULT_MAX_ERRORS))
        ]

    assert all(r.observation.result["data"].startswith("Error: User nobody_") for r in results)
    assert [r.done for r in results] == [False] * (DEFAULT_MAX_ERRORS - 1) + [True]
    assert results[-1].observation.metadata["termination_reason"] == "too_many_errors"
    assert results[-1].reward == 0.0
    threads = [thread for name, thread in where if name == "call_tool"]
    assert all(t.startswith("uvicorn-") for t in threads[:-1]), threads
    assert threads[-1].startswith("tau2-episode")
    assert [t for name, t in where if name == "score"] == [threads[-1]]


async def test_a_rate_limited_customer_call_is_retried(asgi_server, llm_server, server_token):
    llm_server.add(text("Hi."), error(429, "slow down"), text("My id is noah_muller_9847."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2")
        reply = await env.call_tool("respond_to_user", message="Your user id?")
    assert reply == "My id is noah_muller_9847."
    assert len(llm_server.chat_requests()) == 3


async def test_a_new_reset_ends_the_open_conversation(asgi_server, llm_server, server_token):
    llm_server.add(text("Hi, airline question."), text("Hi, retail question."), text("Sure."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        first = await env.reset(task_id="2")
        await env.call_tool("get_user_details", user_id="noah_muller_9847")
        first_state = await env.state()
        second = await env.reset(domain="retail", task_id="0")
        second_state = await env.state()
        tools = await env.list_tools(use_cache=False)
        reply = await env.call_tool("respond_to_user", message="How can I help?")

    assert first.observation.metadata["domain"] == "airline"
    assert second.observation.metadata["user_message"] == "Hi, retail question."
    assert second_state.episode_id != first_state.episode_id
    assert second_state.step_count == 0
    assert "get_order_details" in {t.name for t in tools}
    assert reply == "Sure."


async def test_reset_without_credentials_explains_what_to_do(asgi_server, llm_server):
    async with Tau2Env(base_url=asgi_server.url) as env:
        with pytest.raises(Exception) as failure:
            await env.reset(task_id="2")
        # The server keeps working: a token makes the next reset succeed.
        llm_server.add(text("Hi."))
        result = await env.reset(task_id="2", hf_token=VISITOR_TOKEN)

    message = str(failure.value)
    assert "hf_token" in message and "HF_TOKEN" in message and "TAU2_USER_PROVIDER" in message
    assert result.observation.metadata["user_message"] == "Hi."
    assert [r.token for r in llm_server.chat_requests()] == [VISITOR_TOKEN]


async def test_a_given_token_is_used_instead_of_the_servers(asgi_server, llm_server, server_token):
    llm_server.add(text("Hi."), text("Fine. ###STOP###"))
    async with Tau2Env(base_url=asgi_server.url) as env:
        reset = await env.reset(task_id="2", hf_token=VISITOR_TOKEN)
        end = await env.step(
            CallToolAction(tool_name="respond_to_user", arguments={"message": "Bye"})
        )
        state = await env.state()

    assert [r.token for r in llm_server.chat_requests()] == [VISITOR_TOKEN, VISITOR_TOKEN]
    for payload in (reset.observation, end.observation, state):
        assert VISITOR_TOKEN not in json.dumps(payload.model_dump(mode="json"))


async def test_the_mcp_endpoint_lists_the_domain_tools(asgi_server, llm_server):
    import httpx

    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        response = await client.post(
            "/mcp", json={"jsonrpc": "2.0", "method": "tools/list", "params": {}, "id": 1}
        )
    names = {t["name"] for t in response.json()["result"]["tools"]}
    assert {"get_user_details", "respond_to_user", "done"} <= names


async def test_list_tools_action_answers_with_schemas(asgi_server, llm_server):
    async with Tau2Env(base_url=asgi_server.url) as env:
        result = await env.step(ListToolsAction())
    assert result.done is False
    assert any(t.name == "respond_to_user" for t in result.observation.tools)


def _first_task(domain: str) -> str:
    from tau2_env.engine import catalog

    return catalog.get_domain(domain).splits["test"][0]

"""Gym-style use: a step's action given as text is read as τ²'s own gym reads it
(``tau2.utils.tools.parse_action_string``: a tool call as JSON or ``name(arg=…)``, any
other text said to the customer), so a text-only policy can play an episode — and what
it says reaches τ² exactly as ``respond_to_user`` would have said it."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.asyncio.client import connect

from tau2_env import Tau2Env
from tau2_env.faces.server import text_action
from tests.support.fixtures import LiveServer
from tests.support.scripts import gold_script

VISITOR_TOKEN = "hf_visitor_token_gym_5555555"
GOLD_USER = "ethan_martin_2396"
GOLD_POLICY = [  # a text-only policy's actions for airline/27, in τ²'s gym formats
    f"get_user_details(user_id='{GOLD_USER}')",
    json.dumps({"name": "send_certificate", "arguments": {"user_id": GOLD_USER, "amount": 150}}),
    "I have sent you a $150 certificate. Anything else?",
]


def test_text_is_read_as_taus_gym_reads_it():
    assert text_action("Hello, how can I help?") == {
        "type": "call_tool",
        "tool_name": "respond_to_user",
        "arguments": {"message": "Hello, how can I help?"},
    }
    assert text_action(f"get_user_details(user_id='{GOLD_USER}')")["arguments"] == {
        "user_id": GOLD_USER
    }
    assert text_action(GOLD_POLICY[1])["tool_name"] == "send_certificate"
    # Text that only looks like a call is speech, as in τ²'s gym.
    assert text_action("call me (maybe)")["tool_name"] == "respond_to_user"


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
async def test_a_text_only_policy_plays_the_golden_episode_to_reward_1(asgi_server, llm_server):
    gold_script(llm_server)
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="27", domain="airline", hf_token=VISITOR_TOKEN)
        results = [await env.step(action) for action in GOLD_POLICY]

    assert [r.done for r in results] == [False, False, True]
    assert results[0].observation.tool_name == "get_user_details"
    assert GOLD_USER in json.dumps(results[0].observation.result)
    assert results[-1].reward == 1.0
    said = [
        m["content"]
        for m in results[-1].observation.metadata["messages"]
        if m["role"] == "assistant" and m.get("content")
    ]
    assert said[-1] == GOLD_POLICY[-1]


async def _talk_turn(asgi_server: LiveServer, step_data) -> tuple[list[dict], list[dict]]:
    """One episode of airline/27 whose only action is ``step_data`` over ``/ws``: the
    customer LLM's requests and the episode's messages (without their timings and ids)."""
    ws_url = asgi_server.ws_url("/ws")
    async with connect(ws_url) as ws:
        reset = {"task_id": "27", "domain": "airline", "hf_token": VISITOR_TOKEN, "seed": 1}
        await ws.send(json.dumps({"type": "reset", "data": reset}))
        assert json.loads(await ws.recv())["type"] == "observation"
        await ws.send(json.dumps({"type": "step", "data": step_data}))
        ended = json.loads(await ws.recv())["data"]
    assert ended["done"] is True
    # Not compared: when each message was made, and (τ² 1.x) the provider's raw answer,
    # whose completion id is new on every answer.
    messages = [
        {
            k: v
            for k, v in m.items()
            if k not in ("timestamp", "raw_data", "generation_time_seconds")
        }
        for m in ended["observation"]["metadata"]["messages"]
    ]
    return messages, ended["reward"]


async def test_a_text_action_reaches_tau2_as_respond_to_user_does(asgi_server, llm_server):
    said = "I have sent you a $150 certificate. Anything else?"
    forms = [
        {"type": "call_tool", "tool_name": "respond_to_user", "arguments": {"message": said}},
        said,  # {"type": "step", "data": "<text>"}
        {"action": said},  # what openenv's client sends for step("<text>")
    ]
    seen = []
    for form in forms:
        llm_server.reset()
        gold_script(llm_server)
        messages, reward = await _talk_turn(asgi_server, form)
        customer_requests = [r.body for r in llm_server.chat_requests()]
        seen.append((customer_requests, messages, reward))

    assert seen[0][1][-2]["content"] == said  # the agent's words, then the customer's goodbye
    assert seen[1] == seen[0]
    assert seen[2] == seen[0]


async def test_http_step_reads_a_text_action_too(asgi_server, llm_server):
    async with httpx.AsyncClient(base_url=asgi_server.url) as client:
        answer = await client.post("/step", json={"action": "Hello, how can I help?"})

    # HTTP /step has no open episode (each call is a fresh environment): the action was
    # read as respond_to_user, which says so, instead of a 422 for a malformed action.
    assert answer.status_code == 200, answer.text
    assert answer.json()["observation"]["tool_name"] == "respond_to_user"

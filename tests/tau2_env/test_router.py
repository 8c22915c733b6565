"""Two OpenEnv processes behind ``python -m tau2_env.gate.session_router``.

The router is started as a deployment starts it (a process of its own, serving the
standalone ``tau2_env.faces.server:app`` on two uvicorn processes). Sessions spread over both
processes; every later request naming a session — a JSON-RPC ``tools/call`` on a fresh
connection, a ``/ws?session_id=…`` attach, an ``/agent/mcp`` call — reaches the process
holding it (without that, about half would answer ``Unknown session_id``), even after
a stranger's refused close of it; and a client's cap counts its sessions on both
processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.support.llm_server import ScriptedLLM
from tests.support.processes import Process, start_router, stop, wait_until_up

ROOT = Path(__file__).resolve().parents[2]
CAP = 3  # TAU2_SESSIONS_PER_CLIENT
ALICE = "hf_router_alice_0123456789"
BOB = "hf_router_bob_0123456789"
CHARLIE = "hf_router_charlie_0123456789"


@pytest.fixture(scope="module")
def router(scripted_llm_session: ScriptedLLM) -> Iterator[Process]:
    drop = ("HF_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DATABASE_URL", "REDIS_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(
        TAU2_HF_ROUTER_URL=scripted_llm_session.base_url,
        TAU2_HF_HUB_URL=scripted_llm_session.hub_url,
        TAU2_DOMAIN="airline",
        TAU2_SPLIT="test",
        TAU2_SESSIONS_PER_CLIENT=str(CAP),
        MAX_CONCURRENT_ENVS="16",
        TAU2_LLM_TIMEOUT="30",
        PYTHONPATH=str(ROOT),
    )
    server = start_router(env, app="tau2_env.faces.server:app")
    try:
        wait_until_up(server, timeout=180)
        yield server
    finally:
        stop(server)


@pytest.fixture
def customer(llm_server: ScriptedLLM) -> ScriptedLLM:
    llm_server.responder = lambda request: "Hi, I'd like to change my reservation."
    return llm_server


def _rpc(method: str, **params) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def _post_mcp(router: Process, body: dict, token: str) -> httpx.Response:
    """One JSON-RPC call on a connection of its own."""
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(f"{router.url}/mcp", json=body, headers=headers)


async def _ws_step(ws, message: dict) -> dict:
    await ws.send(json.dumps(message))
    return json.loads(await ws.recv())


async def test_http_sessions_land_on_both_processes_and_every_call_finds_its_own(router, customer):
    created = [
        await _post_mcp(router, _rpc("openenv/session/create"), token)
        for token in (ALICE, BOB, ALICE, BOB)
    ]
    sessions = [(r.json()["result"]["session_id"], r.headers["x-tau2-process"]) for r in created]
    assert {process for _, process in sessions} == {"0", "1"}

    for (session_id, process), token in zip(sessions, (ALICE, BOB, ALICE, BOB), strict=True):
        # openenv's MCPToolClient: /ws?session_id=… to reset, JSON-RPC over HTTP for tools.
        headers = {"Authorization": f"Bearer {token}"}
        url = router.ws_url(f"/ws?session_id={session_id}")
        async with connect(url, additional_headers=headers) as ws:
            assert ws.response.headers["x-tau2-process"] == process
            reset = await _ws_step(ws, {"type": "reset", "data": {"task_id": "2"}})
            assert reset["type"] == "observation", reset
            assert reset["data"]["observation"]["metadata"]["user_message"]
            for _ in range(3):  # each on a fresh connection
                call = _rpc(
                    "tools/call",
                    session_id=session_id,
                    name="get_user_details",
                    arguments={"user_id": "mia_li_3668"},
                )
                answer = await _post_mcp(router, call, token)
                assert answer.headers["x-tau2-process"] == process
                assert "error" not in answer.json(), answer.json()
                assert "mia_li_3668" in json.dumps(answer.json()["result"])
            reply = await _ws_step(
                ws,
                {
                    "type": "step",
                    "data": {
                        "type": "call_tool",
                        "tool_name": "respond_to_user",
                        "arguments": {"message": "How can I help?"},
                    },
                },
            )
            assert reply["type"] == "observation", reply
        closed = await _post_mcp(
            router, _rpc("openenv/session/close", session_id=session_id), token
        )
        assert closed.json()["result"]["closed"] is True
        assert closed.headers["x-tau2-process"] == process


async def test_a_strangers_refused_close_leaves_her_calls_going_to_her_process(router):
    created = await _post_mcp(router, _rpc("openenv/session/create"), ALICE)
    session_id = created.json()["result"]["session_id"]
    process = created.headers["x-tau2-process"]

    close = _rpc("openenv/session/close", session_id=session_id)
    refused = await _post_mcp(router, close, BOB)
    assert refused.status_code == 404
    assert "error" in refused.json()
    assert refused.headers["x-tau2-process"] == process

    # Each on a fresh connection, as the router would spread calls it has no route for.
    answers = [
        await _post_mcp(router, _rpc("tools/list", session_id=session_id), ALICE) for _ in range(12)
    ]
    failed = [a.json() for a in answers if a.status_code != 200 or "error" in a.json()]
    assert failed == []
    assert {a.headers["x-tau2-process"] for a in answers} == {process}

    closed = await _post_mcp(router, close, ALICE)
    assert closed.json()["result"]["closed"] is True
    assert closed.headers["x-tau2-process"] == process


async def test_websocket_sessions_spread_and_a_clients_cap_counts_both_processes(router, customer):
    headers = {"Authorization": f"Bearer {CHARLIE}"}

    async def opened(stack: contextlib.AsyncExitStack):
        ws = await stack.enter_async_context(
            connect(router.ws_url("/ws"), additional_headers=headers)
        )
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": "state"}))
        return ws, json.loads(await ws.recv())

    async with contextlib.AsyncExitStack() as stack:
        held = [await opened(stack) for _ in range(CAP)]
        assert [answer["type"] for _, answer in held] == ["state"] * CAP
        processes = [ws.response.headers["x-tau2-process"] for ws, _ in held]
        assert set(processes) == {"0", "1"}  # e.g. 2 + 1: each process alone has room

        async with contextlib.AsyncExitStack() as extra:
            _, refused = await opened(extra)
        assert refused["type"] == "error"
        assert refused["data"]["code"] == "CAPACITY_REACHED"
        assert f"{CAP} open sessions" in refused["data"]["message"]
        assert refused["data"]["retry_after"] >= 1

        # Another person is not counted with charlie.
        async with contextlib.AsyncExitStack() as other:
            ws = await other.enter_async_context(
                connect(router.ws_url("/ws"), additional_headers={"Authorization": f"Bearer {BOB}"})
            )
            assert (await _ws_step(ws, {"type": "state"}))["type"] == "state"

        # One closes: its slot is free again, wherever the next one lands.
        first_ws, _ = held[0]
        await first_ws.close()
        await asyncio.sleep(0.5)
        async with contextlib.AsyncExitStack() as again:
            ws, answer = await opened(again)
            assert answer["type"] == "state", answer
            reset = await _ws_step(ws, {"type": "reset", "data": {"task_id": "2"}})
            assert reset["data"]["observation"]["metadata"]["user_message"]


async def test_a_request_the_router_cannot_read_is_refused_in_words(router):
    reader, writer = await asyncio.open_connection("127.0.0.1", int(router.url.rsplit(":", 1)[1]))
    writer.write(b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n")
    await writer.drain()
    answer = await reader.read()
    writer.close()
    assert answer.startswith(b"HTTP/1.1 400")
    assert b"Bad request head." in answer

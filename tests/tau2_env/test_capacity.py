"""Capacity that cannot be held hostage: a per-client cap on open sessions, idle sessions
closed, and a refusal that says when to retry — on a real server process (uvicorn,
``tau2site.asgi:application``) with 3 slots, 2 per client and a 2-second idle time; and a
trainer's studio key with a cap of its own (64), on the live server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, asynccontextmanager

import httpx
import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.agents.credentials import install
from apps.agents.services import api_key_create
from tau2_env.gate.capacity import CapacityReached, SessionSlots
from tau2site.asgi import application
from tests.support import processes
from tests.support.mcp_client import INITIALIZE, MCP_HEADERS, mcp_initialize, mcp_session

IDLE = 2
OPENENV_REAPER_INTERVAL = 5  # openenv checks HTTP sessions every max(idle / 4, 5) s


@pytest.fixture(scope="module")
def small_server(django_db_setup, scripted_llm_session) -> Iterator[processes.Process]:
    env = processes.environment(
        llm=scripted_llm_session,
        extra={
            "MAX_CONCURRENT_ENVS": "3",
            "TAU2_SESSIONS_PER_CLIENT": "2",
            "TAU2_SESSION_IDLE_SECONDS": str(IDLE),
        },
    )
    web = processes.start_web(env)
    try:
        processes.wait_until_up(web)
        yield web
    finally:
        processes.stop(web)


@asynccontextmanager
async def openenv_session(server: processes.Process, token: str | None = None):
    """A ``/ws`` session; yields the connection and the first answer (a state, or the
    error the server sent instead)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with connect(server.ws_url("/ws"), additional_headers=headers) as ws:
        # A refused connection gets its error frame unasked and is closed at once.
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": "state"}))
        yield ws, json.loads(await ws.recv())


async def test_a_client_is_capped_then_idle_sessions_free_the_slots(small_server):
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(openenv_session(small_server))
        second = await stack.enter_async_context(openenv_session(small_server))
        async with openenv_session(small_server) as (_, third):
            pass
        # Another client still gets the server's last slot; then the server is full.
        mcp_url = f"{small_server.url}/agent/mcp"
        other = await stack.enter_async_context(mcp_session(mcp_url, token="hf_other_client_1"))
        full = await mcp_initialize(mcp_url, token="hf_third_client_22")

        assert first[1]["type"] == second[1]["type"] == "state"
        assert third["type"] == "error"
        refusal = third["data"]
        assert refusal["code"] == "CAPACITY_REACHED"
        assert "2 open sessions" in refusal["message"]
        assert 1 <= refusal["retry_after"] <= IDLE, refusal
        assert (await other.list_tools()).tools
        assert full.status_code == 503
        assert 1 <= int(full.headers["retry-after"]) <= IDLE
        error = full.json()["error"]
        assert error["data"]["code"] == "CAPACITY_REACHED"
        assert error["data"]["retry_after"] == int(full.headers["retry-after"])
        assert "hf_third_client_22" not in full.text

        # Nobody says anything: after the idle time the server closes the sessions.
        started = time.monotonic()
        for ws, _ in (first, second):
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), timeout=IDLE + 5)
            assert closed.value.rcvd.code == 1001
        assert time.monotonic() - started < IDLE + 5
        await asyncio.sleep(IDLE + 1)  # the MCP reaper runs every IDLE / 4 s at most

        # The same clients connect again.
        async with (
            openenv_session(small_server) as (_, again),
            mcp_session(f"{small_server.url}/agent/mcp", token="hf_third_client_22") as session,
        ):
            assert again["type"] == "state"
            assert (await session.list_tools()).tools


async def test_sessions_opened_over_http_are_capped_and_reaped(small_server):
    async def create() -> dict:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.post(
                f"{small_server.url}/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}},
            )
        return response.json() | {"retry_after_header": response.headers.get("retry-after")}

    created = [await create(), await create()]
    refused = await create()

    assert all("session_id" in answer["result"] for answer in created)
    assert refused["error"]["data"]["code"] == "CAPACITY_REACHED"
    assert refused["error"]["data"]["retry_after"] >= 1
    assert refused["retry_after_header"] == str(refused["error"]["data"]["retry_after"])

    await asyncio.sleep(IDLE + OPENENV_REAPER_INTERVAL + 1)
    assert "session_id" in (await create())["result"]


def test_retry_after_is_when_the_first_slot_can_go_idle():
    now = [100.0]
    slots = SessionSlots(total=3, per_client=2, idle_seconds=60, clock=lambda: now[0])
    early = slots.acquire("address:a")
    now[0] = 130.0
    slots.acquire("address:a")
    with pytest.raises(CapacityReached) as per_client:
        slots.acquire("address:a")
    slots.touch(early)  # early is active again: the later slot goes idle first
    now[0] = 140.0
    with pytest.raises(CapacityReached) as again:
        slots.acquire("address:a")
    slots.acquire("address:b")
    with pytest.raises(CapacityReached) as full:
        slots.acquire("address:c")
    slots.release(early)
    slots.acquire("address:c")

    assert per_client.value.retry_after == 30  # the first slot idles at 160
    assert again.value.retry_after == 50  # both were active at 130: idle at 190
    assert full.value.limit == 3 and full.value.active == 3
    assert full.value.details()["code"] == "CAPACITY_REACHED"


def test_a_credentials_own_limit_may_exceed_the_per_client_cap_up_to_the_key_maximum():
    slots = SessionSlots(total=10, per_client=2, per_key_max=6, idle_seconds=60)

    held = [slots.acquire("key:trainer", limit=8) for _ in range(6)]
    with pytest.raises(CapacityReached) as capped:
        slots.acquire("key:trainer", limit=8)
    slots.acquire("person:1")
    slots.acquire("person:1")
    with pytest.raises(CapacityReached) as default:
        slots.acquire("person:1")

    assert len(held) == 6 and capped.value.limit == 6  # the server's maximum wins
    assert "this API key already has 6 open sessions" in str(capped.value)
    assert default.value.limit == 2  # no limit of its own: the per-client cap


# --- a trainer's key: its own cap, set when it was made ---------------------------------


async def test_a_key_with_a_cap_of_64_holds_64_sessions_and_the_65th_is_told_when_to_retry(
    asgi_server, llm_server, alice, monkeypatch
):
    install()
    slots = application.mcp_app.slots
    monkeypatch.setattr(slots, "total", 100)  # the key's cap, not the server's, is reached
    _, trainer = await sync_to_async(api_key_create)(user=alice, name="grpo", max_sessions=64)
    _, other = await sync_to_async(api_key_create)(user=alice, name="notebook")
    url = f"{asgi_server.url}/agent/mcp"
    opened: list[tuple[dict, httpx.Response]] = []
    try:
        async with httpx.AsyncClient(timeout=60) as http:

            async def initialize(raw: str) -> httpx.Response:
                headers = {**MCP_HEADERS, "Authorization": f"Bearer {raw}"}
                response = await http.post(url, headers=headers, json=INITIALIZE)
                opened.append((headers, response))
                return response

            batch = await asyncio.gather(*(initialize(trainer) for _ in range(64)))
            refused = await initialize(trainer)
            beside = await initialize(other)  # alice's other keys share the default cap
    finally:
        async with httpx.AsyncClient(timeout=60) as http:
            for headers, response in opened:
                if "mcp-session-id" in response.headers:
                    session = {**headers, "Mcp-Session-Id": response.headers["mcp-session-id"]}
                    await http.delete(url, headers=session)

    assert [r.status_code for r in batch] == [200] * 64
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["data"]["code"] == "CAPACITY_REACHED"
    assert (error["data"]["active_sessions"], error["data"]["max_sessions"]) == (64, 64)
    assert error["data"]["retry_after"] >= 1
    assert refused.headers["retry-after"] == str(error["data"]["retry_after"])
    assert "this API key already has 64 open sessions" in error["message"]
    assert beside.status_code == 200

"""The agent faces' sessions as closed as the pages (issue 18, items 1, 3 and 4), on a live
uvicorn serving the project's ASGI app with the studio's resolver:

* an OpenEnv or MCP session answers only the credential that opened it — another
  person's key and an anonymous client find no such session, and nothing runs;
* a slot is granted only to credentials that resolve (a made-up token gets none), and
  one person's keys share one cap: the others are still admitted;
* revoking a key, or signing out, ends its open sessions within seconds, with a reason.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from apps.agents.credentials import install
from apps.agents.services import api_key_create, api_key_revoke
from tests.support.llm_server import text
from tests.support.mcp_client import INITIALIZE, MCP_HEADERS
from tests.support.people import signed_in

REVOKED_WITHIN = 5.0  # seconds: the target


@pytest.fixture(autouse=True)
def studio_keys():
    install()


@pytest.fixture
def customer(llm_server):
    llm_server.responder = lambda request: text("Hi, I need help with my booking.")
    return llm_server


async def _key(user, name: str = "agent") -> tuple[int, dict[str, str]]:
    key, raw = await sync_to_async(api_key_create)(user=user, name=name)
    return key.pk, {"Authorization": f"Bearer {raw}"}


def _slots():
    from tau2site.asgi import application

    return application.mcp_app.slots


async def _rpc(http: httpx.AsyncClient, method: str, headers: dict, **params) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    return await http.post("/mcp", json=body, headers=headers)


# --- 1. sessions belong to their opener ----------------------------------------------


async def test_an_openenv_session_over_http_answers_only_the_key_that_opened_it(
    asgi_server, customer, alice, bob
):
    _, alice_key = await _key(alice)
    _, bob_key = await _key(bob)
    async with httpx.AsyncClient(base_url=asgi_server.url, timeout=60) as http:
        created = await _rpc(http, "openenv/session/create", alice_key)
        session_id = created.json()["result"]["session_id"]
        strangers = {"bob": bob_key, "anonymous": {}}
        answers = {}
        for who, headers in strangers.items():
            call = await _rpc(
                http,
                "tools/call",
                headers,
                session_id=session_id,
                name="respond_to_user",
                arguments={"message": f"hello from {who}"},
            )
            close = await _rpc(http, "openenv/session/close", headers, session_id=session_id)
            answers[who] = (call, close)
        # Still alice's, still open: her own call is served.
        tools = await _rpc(http, "tools/list", alice_key, session_id=session_id)

    for who, (call, close) in answers.items():
        for response in (call, close):
            assert response.status_code == 404, (who, response.text)
            error = response.json()["error"]
            assert error["message"] == f"Unknown session_id: {session_id}"
            assert response.json()["id"] == 7
    assert tools.status_code == 200 and tools.json()["result"]["tools"], tools.text
    assert customer.chat_requests() == []  # nothing ran for bob nor for the anonymous


async def test_a_websocket_cannot_attach_to_another_persons_session(
    asgi_server, customer, alice, bob
):
    _, alice_key = await _key(alice)
    _, bob_key = await _key(bob)
    async with httpx.AsyncClient(base_url=asgi_server.url, timeout=60) as http:
        created = await _rpc(http, "openenv/session/create", alice_key)
    session_id = created.json()["result"]["session_id"]
    url = asgi_server.ws_url(f"/ws?session_id={session_id}")

    for headers in (bob_key, {}):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url, additional_headers=headers):
                pass
        assert refused.value.response.status_code == 403
    async with connect(url, additional_headers=alice_key) as ws:
        await ws.send(json.dumps({"type": "state"}))
        assert json.loads(await ws.recv())["type"] == "state"


async def test_a_frame_cannot_close_another_persons_session(asgi_server, customer, alice, bob):
    _, alice_key = await _key(alice)
    _, bob_key = await _key(bob)
    async with httpx.AsyncClient(base_url=asgi_server.url, timeout=60) as http:
        created = await _rpc(http, "openenv/session/create", alice_key)
        session_id = created.json()["result"]["session_id"]
        async with connect(asgi_server.ws_url("/ws"), additional_headers=bob_key) as ws:
            close = {"method": "openenv/session/close", "params": {"session_id": session_id}}
            await ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "id": 3, **close}}))
            answer = json.loads(await ws.recv())
        tools = await _rpc(http, "tools/list", alice_key, session_id=session_id)

    assert answer["type"] == "mcp"
    assert answer["data"]["error"]["message"] == f"Unknown session_id: {session_id}"
    assert answer["data"]["id"] == 3
    assert tools.status_code == 200, tools.text  # alice's session was not closed


async def test_an_mcp_session_answers_only_the_key_that_opened_it(
    asgi_server, customer, alice, bob
):
    _, alice_key = await _key(alice)
    _, bob_key = await _key(bob)
    url = f"{asgi_server.url}/agent/mcp"
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(timeout=60) as http:
        opened = await http.post(url, headers={**MCP_HEADERS, **alice_key}, json=INITIALIZE)
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"], **MCP_HEADERS}
        # A second key of alice's is another credential: not the session's either.
        _, alice_other = await _key(alice, "other")
        refused = {
            who: await http.post(url, headers={**session, **headers}, json=listing)
            for who, headers in (("bob", bob_key), ("anonymous", {}), ("other key", alice_other))
        }
        served = await http.post(url, headers={**session, **alice_key}, json=listing)

    assert {who: r.status_code for who, r in refused.items()} == dict.fromkeys(refused, 404)
    assert served.status_code == 200, served.text


# --- 3. fair capacity ------------------------------------------------------------------


async def test_a_made_up_token_gets_no_slot(asgi_server, customer):
    customer.unknown_tokens.update({f"hf_bogus_{n}" for n in range(5)})
    before = _slots().active
    async with httpx.AsyncClient(timeout=30) as http:
        answers = [
            await http.post(
                f"{asgi_server.url}/agent/mcp",
                headers={**MCP_HEADERS, "Authorization": f"Bearer hf_bogus_{n}"},
                json=INITIALIZE,
            )
            for n in range(5)
        ]
        created = await http.post(
            f"{asgi_server.url}/mcp",
            headers={"Authorization": "Bearer hf_bogus_0"},
            json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}},
        )

    assert {r.status_code for r in answers} == {401}
    assert answers[0].json()["error"]["message"] == "Hugging Face does not know this token."
    assert "error" in created.json() and "does not know this token" in created.text
    assert _slots().active == before


async def test_one_persons_keys_share_one_cap_and_others_are_still_admitted(
    asgi_server, customer, alice, bob, monkeypatch
):
    monkeypatch.setattr(_slots(), "per_client", 2)
    keys = [(await _key(alice, f"k{n}"))[1] for n in range(3)]
    _, bob_key = await _key(bob)
    url = f"{asgi_server.url}/agent/mcp"
    async with httpx.AsyncClient(timeout=30) as http:
        opened = [await http.post(url, headers={**MCP_HEADERS, **k}, json=INITIALIZE) for k in keys]
        bobs = await http.post(url, headers={**MCP_HEADERS, **bob_key}, json=INITIALIZE)
        for response in (*opened, bobs):
            if "mcp-session-id" in response.headers:
                await http.delete(
                    url,
                    headers={
                        **MCP_HEADERS,
                        **(bob_key if response is bobs else keys[opened.index(response)]),
                        "Mcp-Session-Id": response.headers["mcp-session-id"],
                    },
                )

    assert [r.status_code for r in opened] == [200, 200, 503]
    refusal = opened[2].json()["error"]
    assert refusal["data"]["code"] == "CAPACITY_REACHED"
    assert refusal["data"]["max_sessions"] == 2
    assert "you already have 2 open sessions" in refusal["message"]
    assert "per person" in refusal["message"]
    assert bobs.status_code == 200, bobs.text


# --- 4. revocation bites ------------------------------------------------------------


async def _closed_within(ws, seconds: float) -> tuple[float, ConnectionClosed]:
    started = time.monotonic()
    with pytest.raises(ConnectionClosed) as closed:
        while True:  # frames already in flight may come first
            await asyncio.wait_for(ws.recv(), timeout=seconds)
    return time.monotonic() - started, closed.value


async def test_revoking_a_key_ends_its_open_websocket_within_seconds(asgi_server, customer, alice):
    key_pk, alice_key = await _key(alice)
    async with connect(asgi_server.ws_url("/ws"), additional_headers=alice_key) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"domain": "airline", "task_id": "27"}}))
        assert json.loads(await ws.recv())["type"] == "observation"
        await sync_to_async(api_key_revoke)(user=alice, pk=key_pk)
        took, closed = await _closed_within(ws, REVOKED_WITHIN + 5)

    assert took < REVOKED_WITHIN, took
    assert closed.rcvd.code == 1008
    assert closed.rcvd.reason == "Session ended: This API key was revoked."
    assert len(customer.chat_requests()) == 1  # the opening only: nothing after the revoke


async def test_revoking_a_key_ends_its_mcp_and_http_sessions(asgi_server, customer, alice):
    key_pk, alice_key = await _key(alice)
    before = _slots().active
    async with httpx.AsyncClient(timeout=30) as http:
        await http.post(
            f"{asgi_server.url}/agent/mcp", headers={**MCP_HEADERS, **alice_key}, json=INITIALIZE
        )
        await http.post(
            f"{asgi_server.url}/mcp",
            headers=alice_key,
            json={"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}},
        )
    assert _slots().active == before + 2
    await sync_to_async(api_key_revoke)(user=alice, pk=key_pk)
    started = time.monotonic()
    while _slots().active > before and time.monotonic() - started < REVOKED_WITHIN + 5:
        await asyncio.sleep(0.1)

    assert _slots().active == before
    assert time.monotonic() - started < REVOKED_WITHIN


async def test_signing_out_ends_the_playgrounds_socket(asgi_server, customer, alice):
    browser = await sync_to_async(signed_in)(alice)
    headers = {
        "Cookie": f"sessionid={browser.cookies['sessionid'].value}",
        "Origin": asgi_server.url,
    }
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"domain": "airline", "task_id": "27"}}))
        assert json.loads(await ws.recv())["type"] == "observation"
        response = await sync_to_async(browser.post)("/accounts/sign-out/")
        assert response.status_code == 302
        took, closed = await _closed_within(ws, REVOKED_WITHIN + 5)

    assert took < REVOKED_WITHIN, took
    assert closed.rcvd.code == 1008
    assert "signed out" in closed.rcvd.reason


# --- 1. session ids stay out of the server's logs --------------------------------------


async def test_the_servers_log_lines_never_show_a_session_id(asgi_server, customer, alice):
    import logging

    _, alice_key = await _key(alice)
    async with httpx.AsyncClient(base_url=asgi_server.url, timeout=60) as http:
        created = await _rpc(http, "openenv/session/create", alice_key)
    session_id = created.json()["result"]["session_id"]
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    keep = Keep()
    loggers = [logging.getLogger(name) for name in ("uvicorn.access", "uvicorn.error")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
        logger.addHandler(keep)
    try:
        async with connect(
            asgi_server.ws_url(f"/ws?session_id={session_id}&agent=x"), additional_headers=alice_key
        ) as ws:
            await ws.send(json.dumps({"type": "state"}))
            await ws.recv()
        async with httpx.AsyncClient(base_url=asgi_server.url, timeout=60) as http:
            await http.get(f"/health?session_id={session_id}")
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(keep)
            logger.setLevel(level)

    logged = "\n".join(lines)
    assert "session_id=…" in logged, logged  # the lines are there, the id is not
    assert session_id not in logged


async def test_a_revoked_hugging_face_sign_in_ends_the_keys_sessions(asgi_server, customer, alice):
    from django.utils import timezone

    from apps.accounts.models import HFCredential

    _, alice_key = await _key(alice)
    async with connect(asgi_server.ws_url("/ws"), additional_headers=alice_key) as ws:
        await ws.send(json.dumps({"type": "state"}))
        await ws.recv()
        await sync_to_async(HFCredential.objects.filter(user=alice).update)(
            revoked_at=timezone.now()
        )
        took, closed = await _closed_within(ws, REVOKED_WITHIN + 5)

    assert took < REVOKED_WITHIN, took
    assert closed.rcvd.code == 1008
    assert closed.rcvd.reason.startswith("Session ended: The owner of this API key:")


# --- while the database is away --------------------------------------------------------


def test_the_faces_answer_503_not_500_while_the_database_is_unreachable(alice, llm_server):
    """A key cannot be checked without the database: 503 with Retry-After on every face
    (a refusal would tell the client its key is bad; a 500, that the server is)."""
    from django.db import connection

    from tests.support.outages import CuttableProxy, web_server

    db = connection.settings_dict
    proxy = CuttableProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)).start()
    _, raw = api_key_create(user=alice, name="outage")
    key = {"Authorization": f"Bearer {raw}"}
    url = f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}"
    try:
        with web_server(llm_server, DATABASE_URL=url) as web, httpx.Client(timeout=30) as http:
            proxy.cut()
            answers = {
                "/reset": http.post(f"{web.url}/reset", headers=key, json={"task_id": "27"}),
                "/agent/mcp": http.post(
                    f"{web.url}/agent/mcp", headers={**MCP_HEADERS, **key}, json=INITIALIZE
                ),
                "/mcp": http.post(
                    f"{web.url}/mcp",
                    headers=key,
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "tools/call",
                        "params": {"session_id": "s", "name": "done", "arguments": {}},
                    },
                ),
            }
    finally:
        proxy.stop()

    for face, answer in answers.items():
        assert answer.status_code == 503, (face, answer.status_code, answer.text)
        assert answer.headers["retry-after"] == "5", face
        assert "database cannot be reached" in answer.text, face
    assert llm_server.chat_requests() == []

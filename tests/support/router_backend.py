"""A scripted OpenEnv process for the router's tests, without τ²:
``python -m tau2_env.gate.session_router tests.support.router_backend:app --processes 2``.

* ``/agent/mcp`` keeps MCP sessions in this process's memory, as
  :mod:`tau2_env.faces.mcp_server` does: a ``POST`` without ``Mcp-Session-Id`` opens one for
  its bearer token (its id in the answer's ``Mcp-Session-Id``); a request naming one is
  answered for its opener (``DELETE`` closes it) and refused with 404 ``Session not
  found`` for anyone else, or where this process does not hold it.
* ``/echo`` (HTTP or WebSocket) answers what reached this process: the client's address
  and scheme as uvicorn's proxy headers made them (``scope["client"]``,
  ``scope["scheme"]``) and the forwarding headers (every ``X-Forwarded-*``, ``X-Real-IP``,
  ``Forwarded``).
* ``/health``.

Every JSON answer names the process (``TAU2_PROCESS_INDEX``).
"""

from __future__ import annotations

import json
import os
import uuid

__all__ = ["ADDRESS_HEADERS", "app"]

ADDRESS_HEADERS = ("x-real-ip", "forwarded")
_sessions: dict[str, str] = {}  # MCP session id → the bearer token that opened it


async def app(scope, receive, send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
    elif scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(_echo(scope))})
        await send({"type": "websocket.close", "code": 1000})
    elif scope["path"] == "/echo":
        await _answer(send, 200, _echo(scope))
    elif scope["path"] == "/agent/mcp":
        await _drain(receive)
        await _agent_mcp(scope, send)
    else:
        await _answer(send, 200, {"status": "healthy"})


async def _agent_mcp(scope, send) -> None:
    headers = _headers(scope)
    bearer = (headers.get("authorization") or [""])[0]
    session_id = (headers.get("mcp-session-id") or [None])[0]
    if session_id is None:
        session_id = uuid.uuid4().hex
        _sessions[session_id] = bearer
        await _answer(send, 200, {"opened": True}, session_id=session_id)
    elif _sessions.get(session_id) != bearer:
        await _answer(send, 404, {"error": "Session not found"})
    elif scope["method"] == "DELETE":
        del _sessions[session_id]
        await _answer(send, 200, {"closed": True})
    else:
        await _answer(send, 200, {"answered": True}, session_id=session_id)


def _echo(scope) -> dict:
    headers = _headers(scope)
    client = scope.get("client")
    return {
        "client": client[0] if client else None,
        "scheme": scope["scheme"],
        **{
            name: values
            for name, values in headers.items()
            if name in ADDRESS_HEADERS or name.startswith("x-forwarded-")
        },
    }


def _headers(scope) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return headers


async def _drain(receive) -> None:
    while (await receive()).get("more_body"):
        pass


async def _answer(send, status: int, body: dict, *, session_id: str | None = None) -> None:
    data = json.dumps({**body, "process": os.environ.get("TAU2_PROCESS_INDEX")}).encode()
    headers = [(b"content-type", b"application/json")]
    if session_id is not None:
        headers.append((b"mcp-session-id", session_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})

"""The official MCP SDK's client, as an agent connects to the server's ``/agent/mcp``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

__all__ = ["INITIALIZE", "MCP_HEADERS", "mcp_initialize", "mcp_session"]

# A bare MCP ``initialize`` request and the headers streamable HTTP wants, for tests that
# look at the HTTP answer itself (a refusal, a status code) rather than through the SDK.
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


@asynccontextmanager
async def mcp_session(
    url: str, *, token: str | None = None, initialize: bool = True
) -> AsyncIterator[ClientSession]:
    """An MCP client session on ``url`` (streamable HTTP), sending ``token`` as
    ``Authorization: Bearer``; initialized unless ``initialize=False``. The session's
    ``session_id()`` gives its ``Mcp-Session-Id`` once initialized."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=120)) as http,
        streamable_http_client(url, http_client=http) as (read, write, session_id),
        ClientSession(read, write) as session,
    ):
        session.session_id = session_id
        if initialize:
            await session.initialize()
        yield session


async def mcp_initialize(url: str, *, token: str | None = None) -> httpx.Response:
    """The raw HTTP answer to an ``initialize`` POSTed to ``url`` (with ``token``)."""
    headers = {**MCP_HEADERS, **({"Authorization": f"Bearer {token}"} if token else {})}
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(url, headers=headers, json=INITIALIZE)

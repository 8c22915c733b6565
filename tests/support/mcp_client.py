"""The official MCP SDK's client, as an agent connects to the server's ``/agent/mcp``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

__all__ = ["mcp_session"]


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

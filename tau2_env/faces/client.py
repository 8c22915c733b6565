"""The client: openenv's ``MCPToolClient`` for a τ²-bench server.

Works as in the original OpenEnv Space's quick start::

    async with Tau2Env(base_url="http://localhost:8000") as env:
        result = await env.reset(task_id="2")
        tools = await env.list_tools()
        reply = await env.call_tool("respond_to_user", message="Hi")

A customer's turn is an LLM call (in telecom possibly several, with phone tools), and
scoring may call the judge, so one message can take longer than openenv's default 60 s;
the default here is 300 s.

Gym-style: ``step("…")`` takes an action as text (openenv's client sends it as
``{"action": "…"}``), read on the server as τ²'s own gym reads it — a tool call written
as JSON or ``name(arg=…)``, anything else said to the customer (``respond_to_user``)::

    result = await env.step("Could you give me your user id?")
    result = await env.step("get_user_details(user_id='noah_muller_9847')")

banking_knowledge's retrieval configuration (``tau2 run --retrieval-config``) is chosen on
reset; ``list_tools`` then lists that configuration's tools (bm25's ``KB_search`` by
default, ``grep_only``'s ``grep``, …)::

    result = await env.reset(domain="banking_knowledge", retrieval_config="grep_only")

An evaluation of your own agent, pulled episode by episode until none is left::

    while (result := await env.next_episode(evaluation=42)) is not None:
        ...  # play it: the opening is result.observation.metadata
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from openenv.core.mcp_client import MCPToolClient

__all__ = ["DEFAULT_MESSAGE_TIMEOUT_S", "Tau2Env"]

# How an evaluation's refusal ends its message: "(status 429, retry after 5 s)".
_REFUSAL = re.compile(r"\(status (\d{3})(?:, retry after (\d+) s)?\)")

DEFAULT_MESSAGE_TIMEOUT_S = 300.0


class Tau2Env(MCPToolClient):
    """A τ²-bench OpenEnv session: ``reset``/``step``/``state`` over ``/ws``; ``list_tools``
    and ``call_tool`` as MCP JSON-RPC on ``/mcp``, bound to the same server session
    (openenv 0.10's ``MCPToolClient`` works that way)."""

    def __init__(
        self, *args: Any, message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S, **kwargs: Any
    ) -> None:
        super().__init__(*args, message_timeout_s=message_timeout_s, **kwargs)

    async def _reset_async(self, **kwargs: Any) -> Any:
        """openenv's reset, forgetting the tools ``list_tools`` cached: they are the new
        episode's (its domain's; a knowledge domain's retrieval configuration's)."""
        self._tools_cache = None
        return await super()._reset_async(**kwargs)

    async def next_episode(self, evaluation: int | str, *, poll_s: float = 5.0) -> Any | None:
        """Start the next episode of ``evaluation`` (an evaluation of your own agent, on
        the studio): its ``reset`` result, or ``None`` once every episode has been played
        (or the evaluation was stopped). While every episode left is being played by
        other clients (status 429), waits as the server says (else ``poll_s``) and asks
        again. Other refusals (unknown, not yours, paused) raise ``RuntimeError`` with
        the server's reason."""
        while True:
            try:
                return await self.reset(evaluation=evaluation)
            except RuntimeError as exc:
                found = _REFUSAL.findall(str(exc))  # the server's, before openenv's code
                if not found:
                    raise
                status, retry_after = int(found[-1][0]), found[-1][1]
                if status == 410:
                    return None
                if status != 429:
                    raise
                await asyncio.sleep(float(retry_after) if retry_after else poll_s)

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
"""

from __future__ import annotations

from typing import Any

from openenv.core.mcp_client import MCPToolClient

__all__ = ["DEFAULT_MESSAGE_TIMEOUT_S", "Tau2Env"]

DEFAULT_MESSAGE_TIMEOUT_S = 300.0


class Tau2Env(MCPToolClient):
    """A τ²-bench OpenEnv session: ``reset``/``step``/``state`` over ``/ws``; ``list_tools``
    and ``call_tool`` as MCP JSON-RPC on ``/mcp``, bound to the same server session
    (openenv 0.10's ``MCPToolClient`` works that way)."""

    def __init__(
        self, *args: Any, message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S, **kwargs: Any
    ) -> None:
        super().__init__(*args, message_timeout_s=message_timeout_s, **kwargs)

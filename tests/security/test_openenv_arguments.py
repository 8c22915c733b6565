"""Tool arguments from an OpenEnv client, too deep or too large, are a tool error inside
the conversation (nothing reaches τ², the episode goes on), never a server error."""

from __future__ import annotations

import pytest
from openenv.core.env_server.mcp_types import CallToolAction

from tau2_env import Tau2Env
from tests.support.llm_server import text

pytestmark = pytest.mark.slow


def _nested(depth: int) -> dict:
    value: dict = {"user_id": "x"}
    for _ in range(depth):
        value = {"a": value}
    return value


async def test_arguments_nested_too_deep_or_too_large_are_a_tool_error(
    asgi_server, llm_server, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_0000000000")
    llm_server.add(text("Hi, I want to change my flight."), text("My id is noah_muller_9847."))
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(task_id="2")
        deep = await env.step(CallToolAction(tool_name="get_user_details", arguments=_nested(40)))
        large = await env.step(
            CallToolAction(tool_name="get_user_details", arguments={"user_id": "x" * 70_000})
        )
        reply = await env.call_tool("respond_to_user", message="What's your user id?")

    for result, reason in ((deep, "levels deep"), (large, "larger than 64 KB")):
        assert result.done is False
        assert result.observation.result["is_error"] is True, result.observation
        assert reason in result.observation.result["data"]
    assert reply == "My id is noah_muller_9847."  # the episode went on

"""The MCP server for agents (``/agent/mcp``), through the official MCP SDK's client
against the live ASGI server: streamable HTTP, one MCP session playing one episode.

The customer is the scripted LLM (``gold_script``: task airline/27, solved by looking
the customer up and sending a $150 certificate); the test plays the agent.
"""

from __future__ import annotations

import asyncio
import json
import logging

import httpx
import pytest

from tau2_env.engine import episodes
from tests.support.llm_server import text
from tests.support.mcp_client import mcp_session
from tests.support.scripts import gold_script
from tests.support.threads import record_threads

VISITOR_TOKEN = "hf_visitor_token_mcp_22222222"
GOLD_USER = "ethan_martin_2396"


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
async def test_the_sdk_client_plays_a_golden_episode_to_reward_1(asgi_server, llm_server):
    gold_script(llm_server)
    url = f"{asgi_server.url}/agent/mcp?domain=airline&task_id=27"
    async with mcp_session(url, token=VISITOR_TOKEN, initialize=False) as session:
        init = await session.initialize()
        tools = (await session.list_tools()).tools
        started = await session.call_tool("start", {})
        user = await session.call_tool("get_user_details", {"user_id": GOLD_USER})
        sent = await session.call_tool("send_certificate", {"user_id": GOLD_USER, "amount": 150})
        reply = await session.call_tool(
            "respond_to_user", {"message": "I have sent you a $150 certificate. Anything else?"}
        )
        after = await session.call_tool("done", {})

    assert init.serverInfo.name == "tau2"
    assert "start" in (init.instructions or "")
    by_name = {tool.name: tool for tool in tools}
    assert {"start", "get_user_details", "send_certificate", "respond_to_user", "done"} <= set(
        by_name
    )
    assert by_name["send_certificate"].inputSchema["type"] == "object"
    assert "user_id" in by_name["send_certificate"].inputSchema["properties"]
    assert by_name["respond_to_user"].inputSchema["required"] == ["message"]

    opening = started.structuredContent
    assert started.isError is False
    assert opening["task_id"] == "27" and opening["domain"] == "airline"
    assert GOLD_USER in opening["user_message"] and "airline" in opening["policy"].lower()
    assert json.loads(started.content[0].text)["user_message"] == opening["user_message"]

    assert json.loads(user.content[0].text)["user_id"] == GOLD_USER
    assert user.structuredContent == {"output": user.content[0].text, "done": False}
    assert sent.isError is False

    final = reply.structuredContent
    assert reply.content[0].text == "Thanks, that's all. ###STOP###"
    assert final["done"] is True and final["reward"] == 1.0
    assert final["termination_reason"] == "user_stop"
    assert final["reward_info"]["reward"] == 1.0
    assert final["reward_info"]["db_check"]["db_match"] is True
    assert [m["role"] for m in final["messages"]][:2] == ["assistant", "user"]
    # After the end, calls say so and keep the verdict.
    assert after.content[0].text == "The conversation has ended."
    assert after.structuredContent["reward"] == 1.0
    # The customer ran on the token of the Authorization header, and it was never echoed.
    assert {r.token for r in llm_server.chat_requests()} == {VISITOR_TOKEN}
    for result in (started, user, sent, reply, after):
        assert VISITOR_TOKEN not in result.model_dump_json()


async def test_a_wrong_tool_argument_is_an_error_result_and_the_episode_goes_on(
    asgi_server, llm_server
):
    llm_server.add(text("Hi, I need to change a flight."), text("My id is noah_muller_9847."))
    async with mcp_session(f"{asgi_server.url}/agent/mcp", token=VISITOR_TOKEN) as session:
        before = await session.call_tool("get_user_details", {"user_id": "x"})
        await session.call_tool("start", {"domain": "airline", "task_id": "2"})
        bad = await session.call_tool("get_user_details", {"no_such_arg": 1})
        unknown = await session.call_tool("no_such_tool", {})
        empty = await session.call_tool("respond_to_user", {"message": ""})
        again = await session.call_tool("start", {})
        reply = await session.call_tool("respond_to_user", {"message": "Your user id?"})

    assert before.isError is True and "call start first" in before.content[0].text
    assert bad.isError is True and "no_such_arg" in bad.content[0].text
    assert bad.structuredContent["done"] is False
    assert unknown.isError is True
    assert empty.isError is True and "non-empty string" in empty.content[0].text
    assert again.isError is True and "one episode" in again.content[0].text
    assert reply.isError is False
    assert reply.structuredContent == {"output": "My id is noah_muller_9847.", "done": False}


async def test_a_domain_tool_is_answered_on_the_event_loop_and_a_customer_turn_in_the_pool(
    asgi_server, llm_server, monkeypatch
):
    where = record_threads(monkeypatch, episodes.Episode, "call_tool", "say")
    llm_server.add(text("Hi, I need to change a flight."), text("Thanks."))
    async with mcp_session(f"{asgi_server.url}/agent/mcp", token=VISITOR_TOKEN) as session:
        await session.call_tool("start", {"domain": "airline", "task_id": "2"})
        user = await session.call_tool("get_user_details", {"user_id": "noah_muller_9847"})
        reply = await session.call_tool("respond_to_user", {"message": "Found you."})

    assert json.loads(user.content[0].text)["user_id"] == "noah_muller_9847"
    assert user.structuredContent["done"] is False
    assert reply.structuredContent == {"output": "Thanks.", "done": False}
    (tool, on), (turn, pooled) = where
    assert (tool, turn) == ("call_tool", "say")
    assert on.startswith("uvicorn-") and pooled.startswith("tau2-episode")


async def test_a_bad_task_or_missing_credentials_are_error_results(asgi_server, llm_server):
    async with mcp_session(f"{asgi_server.url}/agent/mcp", token=VISITOR_TOKEN) as session:
        unknown = await session.call_tool("start", {"domain": "airline", "task_id": "nope"})
        bad_split = await session.call_tool("start", {"split": "nowhere"})
    async with mcp_session(f"{asgi_server.url}/agent/mcp") as session:
        no_token = await session.call_tool("start", {"domain": "airline", "task_id": "2"})

    assert unknown.isError is True and "nope" in unknown.content[0].text
    assert bad_split.isError is True and "nowhere" in bad_split.content[0].text
    assert no_token.isError is True
    assert "HF_TOKEN" in no_token.content[0].text and "Authorization" in no_token.content[0].text
    assert llm_server.chat_requests() == []


async def test_an_unknown_domain_in_the_url_is_a_protocol_error(asgi_server, llm_server):
    from mcp.shared.exceptions import McpError

    url = f"{asgi_server.url}/agent/mcp?domain=nowhere"
    async with mcp_session(url, token=VISITOR_TOKEN) as session:
        with pytest.raises(McpError) as failure:
            await session.list_tools()
    assert "nowhere" in str(failure.value)


async def test_the_url_domain_picks_the_listed_tools(asgi_server, llm_server):
    url = f"{asgi_server.url}/agent/mcp?domain=retail"
    async with mcp_session(url, token=VISITOR_TOKEN) as session:
        names = {tool.name for tool in (await session.list_tools()).tools}
    assert {"get_order_details", "respond_to_user", "done", "start"} <= names
    assert "book_reservation" not in names


async def test_only_the_client_that_opened_a_session_may_use_it(asgi_server, llm_server):
    async with mcp_session(f"{asgi_server.url}/agent/mcp", token=VISITOR_TOKEN) as session:
        await session.list_tools()
        session_id = session.session_id()
        async with httpx.AsyncClient(base_url=asgi_server.url) as http:
            stranger = await http.post(
                "/agent/mcp",
                headers={
                    "Authorization": "Bearer hf_someone_else_000000",
                    "Mcp-Session-Id": session_id,
                    **_mcp_headers(),
                },
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
        still = await session.list_tools()
    assert session_id
    assert stranger.status_code == 404
    assert VISITOR_TOKEN not in stranger.text
    assert any(tool.name == "done" for tool in still.tools)


def _mcp_headers() -> dict[str, str]:
    return {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


async def test_a_session_the_client_closes_normally_logs_no_error(asgi_server, llm_server, caplog):
    llm_server.add(text("Hi, I need to change a flight."))
    url = f"{asgi_server.url}/agent/mcp?domain=airline&task_id=2"
    with caplog.at_level(logging.DEBUG):
        for _ in range(3):  # a session that played, and ones that only looked
            async with mcp_session(url, token=VISITOR_TOKEN) as session:
                await session.list_tools()
                if _ == 0:
                    started = await session.call_tool("start", {})
                    assert started.isError is False
        # The server ends each session after the client's DELETE: let it finish.
        await asyncio.sleep(1.0)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [(r.name, r.getMessage(), r.exc_info) for r in errors]
    assert any(r.levelno < logging.ERROR for r in caplog.records)  # the server was heard


def test_the_sdks_other_errors_are_still_logged():
    import anyio

    from tau2_env.faces.mcp_server import SDK_LOGGER, NormalCloseFilter

    def record(message: str, error: BaseException) -> logging.LogRecord:
        return logging.LogRecord(
            SDK_LOGGER, logging.ERROR, __file__, 1, message, None, (type(error), error, None)
        )

    quiet = NormalCloseFilter()
    assert not quiet.filter(record("Error in standalone SSE writer", anyio.ClosedResourceError()))
    assert quiet.filter(record("Error in standalone SSE writer", RuntimeError("broken")))
    assert quiet.filter(record("Error handling POST request", anyio.ClosedResourceError()))
    assert quiet.filter(logging.LogRecord(SDK_LOGGER, logging.ERROR, __file__, 1, "x", None, None))

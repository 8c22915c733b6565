"""Each conversation's token is used for its customer and judge calls, and only there."""

from __future__ import annotations

import asyncio

from openenv.core.env_server.mcp_types import CallToolAction

from tau2_env import Tau2Env
from tests.support.llm_server import Reply, text
from tests.support.nl_judge import is_judge_request, judge_reply, judge_requests

ALICE = "hf_alice_token_aaaaaaaa"
BOB = "hf_bob_token_bbbbbbbbbb"


async def test_two_concurrent_conversations_never_mix_tokens(asgi_server, llm_server, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_ssssssss")

    def customer(request) -> Reply:
        # Slow enough that both conversations' calls are in flight together.
        return text(f"Reply to: {request.messages[-1]['content']}", delay=0.2)

    llm_server.responder = customer

    async def converse(name: str, token: str) -> list[str]:
        async with Tau2Env(base_url=asgi_server.url) as env:
            await env.reset(task_id="2", hf_token=token)
            return [
                await env.call_tool("respond_to_user", message=f"{name} turn {turn}")
                for turn in range(3)
            ]

    alice, bob = await asyncio.gather(converse("alice", ALICE), converse("bob", BOB))

    assert alice[2] == "Reply to: alice turn 2" and bob[2] == "Reply to: bob turn 2"
    requests = llm_server.chat_requests()
    assert len(requests) == 8
    for request in requests:
        said = request.text()
        if "alice turn" in said:
            assert request.token == ALICE and "bob turn" not in said
        elif "bob turn" in said:
            assert request.token == BOB
    assert {r.token for r in requests} == {ALICE, BOB}
    # The conversations overlapped: each one's calls began before the other's ended
    # (an ordering, not a time budget: the machine may be busy).
    alice_at = [r.received_at for r in requests if r.token == ALICE]
    bob_at = [r.received_at for r in requests if r.token == BOB]
    assert min(alice_at) < max(bob_at) and min(bob_at) < max(alice_at)


async def test_the_judge_of_a_retail_nl_assertion_uses_the_conversations_token(
    asgi_server, llm_server, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_ssssssss")
    monkeypatch.setenv("TAU2_NL_JUDGE", "always")  # judge NL assertions outside the basis too
    monkeypatch.setenv("TAU2_USER_MODEL", "org/customer-model")
    task_id = "105"  # a retail base task with NL assertions

    def customer_or_judge(request) -> Reply:
        if is_judge_request(request):
            return judge_reply(request, reasoning="scripted judge")
        return text("Hi, I want to exchange my tea kettles.")

    llm_server.responder = customer_or_judge
    async with Tau2Env(base_url=asgi_server.url) as env:
        await env.reset(domain="retail", split="base", task_id=task_id, hf_token=ALICE)
        result = await env.step(CallToolAction(tool_name="done", arguments={}))

    judged = judge_requests(llm_server)
    assert len(judged) == 1
    assert judged[0].token == ALICE
    assert judged[0].body["model"] == "org/customer-model"  # not τ²'s fixed gpt-4o-mini
    info = result.observation.metadata["reward_info"]
    assert info["nl_assertions"][0]["met"] is True
    assert info["nl_assertions"][0]["justification"] == "scripted judge"
    assert {r.token for r in llm_server.chat_requests()} == {ALICE}

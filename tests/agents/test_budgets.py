"""Budgets and limits on the agent faces: an outside agent's episode whose customer runs
on a budgeted connection is admitted, reserved and stopped as a web run is.

stella (staff) adds "Team Budget" on the scripted server, its customer model priced at
$1 / $2 per 1M tokens, with a budget of $0.01 a month (and $0.01 per person); bob plays
with his studio key over OpenEnv's ``/ws`` and MCP's ``/agent/mcp``, his customer
``@team-budget/…``. Each customer call takes 1,000 input and 100 output tokens: $0.0012.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from websockets.asyncio.client import connect

from apps.agents.services import api_key_create
from apps.evaluations.services import IN_FLIGHT
from apps.runs import budgets
from apps.runs.models import Run
from apps.tasks.models import Task
from tests.support.agents import agent_runs_of
from tests.support.connections import openai_compatible_connection
from tests.support.llm_server import Reply
from tests.support.mcp_client import mcp_session
from tests.support.people import signed_in

MODEL = "customer-sim"
UNPRICED = "customer-sim-unpriced"
PRICES = (Decimal("1"), Decimal("2"))
ONE_CALL = (1_000, 100)  # $0.0012 at PRICES
AGENT_LINE = "Your booking is fine."
BUDGET = Decimal("0.01")


@pytest.fixture(autouse=True)
def _cleared(connections_cleared):
    """No connection (nor run on one) left over from another test."""


@pytest.fixture
def customer(llm_server):
    """The customer asks once and, told :data:`AGENT_LINE`, ends: two calls an episode."""

    def responder(request):
        if AGENT_LINE in request.text():
            return Reply(content="Thanks, that's all. ###STOP###", usage=ONE_CALL)
        return Reply(content="Hi, I have a question about my booking.", usage=ONE_CALL)

    llm_server.responder = responder
    return llm_server


def team_budget(llm, *, by, **kwargs):
    return openai_compatible_connection(
        llm, by=by, name="Team Budget", models=[(MODEL, PRICES), UNPRICED], **kwargs
    )


def team_history(*, user, connection, n: int = 3) -> None:
    """``n`` completed web runs of airline/27 last month whose customer on ``connection``
    took two calls: what an episode's reservation goes by ($0.0024), outside this month."""
    task = Task.objects.get(domain_id="airline", task_id="27")
    started = budgets.month_window()[0] - timezone.timedelta(hours=1)
    for _ in range(n):
        Run.objects.create(
            task=task,
            domain="airline",
            created_by=user,
            agent_model="some/agent",
            user_model=MODEL,
            user_connection=connection,
            status=Run.Status.COMPLETED,
            started_at=started,
            finished_at=started,
            user_prompt_tokens=2 * ONE_CALL[0],
            user_completion_tokens=2 * ONE_CALL[1],
            user_cost_usd=Decimal("0.0024"),
        )


def customer_calls(llm) -> int:
    return len(llm.chat_requests())


async def ws_episode(asgi_server, key: str, user_model: str) -> tuple[dict, dict | None]:
    """One episode over ``/ws``: the reset's frame, and (when it opened) the frame of
    the agent's one line, after which the customer ends."""
    headers = {"Authorization": f"Bearer {key}"}
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:

        async def send(kind, data):
            await ws.send(json.dumps({"type": kind, "data": data}))
            return json.loads(await ws.recv())

        opened = await send("reset", {"task_id": "27", "user_model": user_model})
        if opened["type"] == "error":
            return opened, None
        call = {"message": AGENT_LINE}
        step = await send(
            "step", {"type": "call_tool", "tool_name": "respond_to_user", "arguments": call}
        )
        return opened, step


async def mcp_episode(asgi_server, key: str, user_model: str):
    """One episode over ``/agent/mcp``: the start's result, and the agent's line's."""
    async with mcp_session(f"{asgi_server.url}/agent/mcp?task_id=27", token=key) as session:
        started = await session.call_tool("start", {"user_model": user_model})
        if started.isError:
            return started, None
        return started, await session.call_tool("respond_to_user", {"message": AGENT_LINE})


def error_of(face: str, opened) -> str | None:
    """What refused an episode at its start, or ``None`` when it started."""
    if face == "ws":
        return opened["data"]["message"] if opened["type"] == "error" else None
    return opened.content[0].text.removeprefix("Error: ") if opened.isError else None


async def test_bobs_episodes_over_ws_and_mcp_never_spend_past_the_connections_001_budget(
    asgi_server, customer, staff, alice, bob
):
    vllm = await sync_to_async(team_budget)(
        customer, by=staff, monthly_budget_usd=BUDGET, person_monthly_budget_usd=BUDGET
    )
    await sync_to_async(team_history)(user=alice, connection=vllm)
    key = (await sync_to_async(api_key_create)(user=bob, name="studio"))[1]
    value = f"@{vllm.slug}/{MODEL}"

    refusals, played = [], 0
    for attempt in range(8):  # today: eight episodes, $0.0192
        face = "ws" if attempt % 2 == 0 else "mcp"
        play = ws_episode if face == "ws" else mcp_episode
        opened, _ = await play(asgi_server, key, value)
        refused = error_of(face, opened)
        if refused is None:
            played += 1
            await sync_to_async(agent_runs_of)(bob, count=played)  # ended and stored
        else:
            refusals.append(refused)

    spent = await sync_to_async(budgets.connection_spend)(connection=vllm)
    # Four episodes of $0.0024 each, each admitted holding $0.0024: a fifth would need
    # $0.0024 where $0.0004 is left.
    assert played == 4 and spent.spent == Decimal("0.0096") <= BUDGET
    assert customer_calls(customer) == 8
    assert len(refusals) == 4
    for refused in refusals:
        assert refused.startswith(
            "The connection “Team Budget” has $0.00040 left of its $0.010 budget this month "
            "($0.0096 spent)"
        )
        assert "this run may cost up to $0.0024 on it" in refused
        assert refused.endswith(
            "Raise the budget or wait for next month; then start a new episode."
        )
    runs = await sync_to_async(agent_runs_of)(bob, count=4)
    assert {(r.status, r.user_connection_id) for r in runs} == {("completed", vllm.pk)}
    assert all(r.user_reserved_usd == Decimal("0.0024") for r in runs)


async def test_without_the_teams_history_the_first_episode_is_refused_at_once_with_the_numbers(
    asgi_server, customer, staff, bob
):
    vllm = await sync_to_async(team_budget)(customer, by=staff, monthly_budget_usd=BUDGET)
    key = (await sync_to_async(api_key_create)(user=bob, name="studio"))[1]

    opened, _ = await ws_episode(asgi_server, key, f"@{vllm.slug}/{MODEL}")

    assert opened["type"] == "error"
    assert opened["data"]["message"].startswith(
        "The connection “Team Budget” has $0.010 left of its $0.010 budget this month ($0 spent); "
        "this run may cost up to $0.42 on it (400k input and 10k output tokens, as the team "
        "has no completed runs of airline on customer-sim to go by)."
    )
    assert customer_calls(customer) == 0
    assert not await sync_to_async(Run.objects.filter(created_by=bob).exists)()


async def test_an_unpriced_customer_on_a_budgeted_connection_is_refused_in_the_forms_words(
    asgi_server, customer, staff, bob
):
    vllm = await sync_to_async(team_budget)(customer, by=staff, monthly_budget_usd=Decimal("5"))
    key = (await sync_to_async(api_key_create)(user=bob, name="studio"))[1]
    value = f"@{vllm.slug}/{UNPRICED}"

    opened, _ = await ws_episode(asgi_server, key, value)
    started, _ = await mcp_episode(asgi_server, key, value)

    words = budgets.unpriced_refusal(connection=vllm, model=UNPRICED)
    assert "staff must set a price for customer-sim-unpriced on the Connections page" in words
    assert opened["data"]["message"] == f"{words}; then start a new episode."
    assert (
        started.isError and started.content[0].text == f"Error: {words}; then start a new episode."
    )
    assert customer_calls(customer) == 0
    assert not await sync_to_async(Run.objects.filter(created_by=bob).exists)()


async def test_an_open_episode_is_a_run_in_flight_and_the_connections_limit_is_kept(
    asgi_server, customer, staff, bob
):
    vllm = await sync_to_async(team_budget)(customer, by=staff, max_in_flight=1)
    key = (await sync_to_async(api_key_create)(user=bob, name="studio"))[1]
    value = f"@{vllm.slug}/{UNPRICED}"  # no budget: an unpriced model is fine
    in_flight = sync_to_async(lambda: Run.objects.filter(IN_FLIGHT, user_connection=vllm).count())

    headers = {"Authorization": f"Bearer {key}"}
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "27", "user_model": value}}))
        opened = json.loads(await ws.recv())
        assert opened["type"] == "observation", opened
        open_episodes = await in_flight()
        full, _ = await mcp_episode(asgi_server, key, value)
    await sync_to_async(agent_runs_of)(bob)  # the closed episode's run ended
    after, _ = await mcp_episode(asgi_server, key, value)

    assert open_episodes == 1  # what the evaluations' dispatcher counts, too
    assert full.isError and full.content[0].text == (
        "Error: The connection “Team Budget” allows 1 run at a time and has 1 in flight (an "
        "open episode is one): start the episode again when one ends."
    )
    assert not after.isError, after.content
    assert customer_calls(customer) == 3  # the first episode's opening, the third's two
    await sync_to_async(agent_runs_of)(bob, count=2)
    assert await in_flight() == 0


async def test_a_spent_month_ends_the_episode_before_the_customers_next_turn(
    asgi_server, customer, staff, alice, bob
):
    vllm = await sync_to_async(team_budget)(customer, by=staff, monthly_budget_usd=BUDGET)
    await sync_to_async(team_history)(user=alice, connection=vllm)
    key = (await sync_to_async(api_key_create)(user=bob, name="studio"))[1]
    task = await sync_to_async(Task.objects.get)(domain_id="airline", task_id="27")

    async with mcp_session(f"{asgi_server.url}/agent/mcp?task_id=27", token=key) as session:
        started = await session.call_tool("start", {"user_model": f"@{vllm.slug}/{MODEL}"})
        assert not started.isError, started.content
        # Meanwhile alice's web run spends the rest of the month: $0.0012 + $0.0090.
        await sync_to_async(Run.objects.create)(
            task=task,
            domain="airline",
            created_by=alice,
            agent_model="some/agent",
            user_model=MODEL,
            user_connection=vllm,
            status=Run.Status.COMPLETED,
            started_at=timezone.now(),
            finished_at=timezone.now(),
            user_prompt_tokens=1,
            user_cost_usd=Decimal("0.0090"),
        )
        ended = await session.call_tool("respond_to_user", {"message": AGENT_LINE})
        after = await session.call_tool("get_user_details", {"user_id": "ethan_martin_2396"})

    reason = (
        "The connection “Team Budget” reached its $0.010 budget this month ($0.010 spent): the "
        "episode ended here, its messages kept. Raise the budget or wait for next month; then "
        "start a new episode."
    )
    assert ended.isError and ended.content[0].text == reason
    assert ended.structuredContent["done"] is True and ended.structuredContent["error"] == reason
    assert after.content[0].text == "The conversation has ended."
    assert customer_calls(customer) == 1  # the opening; the next turn was never asked
    (run,) = await sync_to_async(agent_runs_of)(bob)
    assert (run.status, run.failure, run.error) == ("failed", "budget", reason)
    assert run.user_cost_usd == Decimal("0.0012")


async def test_the_playground_which_records_nothing_may_not_put_its_customer_on_a_budget(
    asgi_server, customer, staff, bob
):
    vllm = await sync_to_async(team_budget)(customer, by=staff, monthly_budget_usd=Decimal("5"))
    session = (await sync_to_async(signed_in)(bob)).cookies["sessionid"].value
    headers = {"Cookie": f"sessionid={session}", "Origin": asgi_server.url}

    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        data = {"task_id": "27", "user_model": f"@{vllm.slug}/{MODEL}"}
        await ws.send(json.dumps({"type": "reset", "data": data}))
        frame = json.loads(await ws.recv())

    assert frame["type"] == "error"
    assert frame["data"]["message"].startswith(
        "The connection “Team Budget” counts what runs on it (a budget, or a limit of runs at "
        "a time), and the playground's episodes are not recorded: play with a studio API key"
    )
    assert customer_calls(customer) == 0

"""Honest numbers: every LLM call of a run is counted and priced by role (the agent's and
the simulated customer's), money keeps its significant digits, and a call without a price
is "unpriced", never $0.

alice runs a scripted conversation: its messages go through the one publisher
(``events_publish``) as the worker stores them, with the token usage τ² recorded.
"""

from decimal import Decimal

import pytest
from django.template import Context, Template

from apps.runs.events import events_publish
from apps.runs.exports import run_export, run_export_tau2
from apps.runs.models import Run
from apps.tasks.models import Task

PRICED = "deepseek-ai/DeepSeek-V4.1-Flash:novita"  # $0.27 / $1.10 per 1M tokens
AGENT_PRICES = (Decimal("0.27"), Decimal("1.1"))
M = Decimal(1_000_000)


def money(value) -> str:
    return Template("{% load costs %}{{ value|money }}").render(Context({"value": value}))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Decimal("0.000032"), "$0.000032"),
        ("0.000032", "$0.000032"),
        (Decimal("0.00042"), "$0.00042"),
        (Decimal("0.27"), "$0.27"),
        (Decimal("0.123456"), "$0.12"),
        (Decimal("1234.5"), "$1,234.50"),
        (Decimal("0"), "$0"),
        (None, "unpriced"),
    ],
)
def test_money_keeps_significant_digits_and_says_unpriced(value, shown):
    assert money(value) == shown


def _run(user, *, user_model=PRICED, kind=Run.Kind.MODEL) -> Run:
    task = Task.objects.get(domain_id="airline", task_id="27")
    return Run.objects.create(
        kind=kind,
        task=task,
        domain="airline",
        created_by=user,
        agent_model=PRICED if kind == Run.Kind.MODEL else "a person",
        user_model=user_model,
        status=Run.Status.RUNNING,
        provenance={"agent_prices": [str(p) for p in AGENT_PRICES]},
    )


def _said(role: str, content: str, prompt: int, completion: int) -> dict:
    return {
        "role": role,
        "content": content,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


def _converse(run: Run, *, agent_prices=AGENT_PRICES, agent_usage=(1000, 50)) -> None:
    events_publish(run=run, messages=[_said("assistant", "Hi! How can I help?", 0, 0)])
    events_publish(
        run=run, messages=[_said("user", "My flight was late.", 100, 20)], agent_prices=agent_prices
    )
    events_publish(
        run=run,
        messages=[_said("assistant", "Sorry to hear that.", *agent_usage)],
        agent_prices=agent_prices,
    )
    events_publish(
        run=run, messages=[_said("user", "Thanks. ###STOP###", 300, 10)], agent_prices=agent_prices
    )


def test_a_run_counts_and_prices_the_customers_calls_apart_from_the_agents(alice, alice_client):
    run = _run(alice)
    _converse(run)
    run.refresh_from_db()

    assert (run.prompt_tokens, run.completion_tokens) == (1000, 50)
    assert run.cost_usd == (1000 * Decimal("0.27") + 50 * Decimal("1.1")) / M
    assert (run.user_prompt_tokens, run.user_completion_tokens) == (400, 30)
    assert run.user_cost_usd == (400 * Decimal("0.27") + 30 * Decimal("1.1")) / M
    # The customer's price is looked up once and kept: the run is charged one price.
    assert [Decimal(p) for p in run.provenance["user_prices"]] == list(AGENT_PRICES)
    customer = run.events.filter(kind="customer").order_by("seq")
    assert [(e.prompt_tokens, e.completion_tokens) for e in customer] == [(100, 20), (300, 10)]
    assert all(e.cost_usd is not None for e in customer)

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    # agent $0.000325 + customer $0.000141 = $0.000466, two significant digits each.
    assert "cost $0.00047" in page
    assert "agent $0.00032 · 1,050 tokens" in page
    assert "customer $0.00014 · 430 tokens" in page
    assert "$0.0000" not in page
    # No judge ran (airline's reward basis has no NL assertions): no judge row.
    assert 'data-testid="cost-judge"' not in page

    listing = alice_client.get("/runs/").content.decode()
    assert "$0.00047" in listing
    total = run.cost_usd + run.user_cost_usd

    usage = run_export(run)["usage"]
    assert usage["by_role"]["customer"] == {
        "prompt_tokens": 400,
        "completion_tokens": 30,
        "cost_usd": str(run.user_cost_usd),
    }
    assert Decimal(usage["total_cost_usd"]) == total
    simulation = run_export_tau2(run)["simulations"][0]
    # τ²'s own fields: agent_cost is the agent's calls only, user_cost the customer's.
    assert simulation["agent_cost"] == float(run.cost_usd)
    assert simulation["user_cost"] == float(run.user_cost_usd)


def test_an_unpriced_customer_is_shown_unpriced_and_never_as_zero(alice, alice_client):
    # The router picks the provider of a bare model id: its price is not known.
    run = _run(alice, user_model="deepseek-ai/DeepSeek-V4.1-Flash")
    _converse(run)
    run.refresh_from_db()

    assert run.cost_usd is not None
    assert (run.user_prompt_tokens, run.user_completion_tokens) == (400, 30)
    assert run.user_cost_usd is None
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "customer unpriced" in page
    assert "cost $0.00032 + unpriced" in page
    assert run_export(run)["usage"]["total_cost_usd"] is None
    assert run_export_tau2(run)["simulations"][0]["user_cost"] is None


def test_a_play_session_costs_only_the_customers_calls(alice, alice_client):
    run = _run(alice, kind=Run.Kind.HUMAN)
    _converse(run, agent_prices=None, agent_usage=(0, 0))  # a person's messages: no usage
    run.refresh_from_db()
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert run.user_cost_usd is not None
    assert "cost $0.00014" in page
    assert 'data-testid="cost-agent"' not in page

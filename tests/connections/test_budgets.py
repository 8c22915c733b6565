"""Budgets of connections: spend read from the runs, shown per connection and per person.

stella (staff) adds the team connection "Team vLLM" on the scripted server with a
budget; alice and bob run on it. Spend is what the runs that started this month (UTC)
cost on it — the agent's calls of runs whose agent is on it, the customer's of runs
whose customer is on it — never a second ledger.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import timezone

from apps.runs import budgets
from apps.runs.models import Run
from apps.tasks.models import Task
from tests.support import connections as with_connections
from tests.support.connections import openai_compatible_connection

# stella (staff) and no connection left over between tests.
staff = with_connections.staff
connections_cleared = with_connections.connections_cleared

MODEL = "scripted-agent"
PRICES = (Decimal("1"), Decimal("2"))  # USD per 1M input / output tokens
ROUTER_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"


def team_vllm(llm, *, by, **kwargs):
    """ "Team vLLM" on the scripted server, offering scripted-agent at $1 / $2 per 1M."""
    return openai_compatible_connection(
        llm, by=by, name="Team vLLM", models=[(MODEL, PRICES)], **kwargs
    )


def spent_run(
    *,
    user,
    agent=None,
    customer=None,
    cost=None,
    user_cost=None,
    started=None,
    status=Run.Status.COMPLETED,
    tokens=(1000, 100),
    **fields,
) -> Run:
    """A model run by ``user`` stored as if it had run: its agent on ``agent``, its
    customer on ``customer`` (connections, or None: the router), costing ``cost`` (the
    agent's) and ``user_cost`` (the customer's), started at ``started`` (default: now)."""
    task = Task.objects.get(domain_id="airline", task_id="27")
    return Run.objects.create(
        task=task,
        domain="airline",
        created_by=user,
        agent_model=MODEL if agent else ROUTER_MODEL,
        user_model=MODEL if customer else ROUTER_MODEL,
        agent_connection=agent,
        user_connection=customer,
        status=status,
        started_at=started or timezone.now(),
        finished_at=timezone.now() if status in Run.FINAL else None,
        prompt_tokens=tokens[0] if agent else 0,
        completion_tokens=tokens[1] if agent else 0,
        user_prompt_tokens=tokens[0] if customer else 0,
        user_completion_tokens=tokens[1] if customer else 0,
        cost_usd=cost,
        user_cost_usd=user_cost,
        error="failed" if status == Run.Status.FAILED else "",
        **fields,
    )


def last_month():
    return budgets.month_window()[0] - timedelta(hours=1)


# --------------------------------------------------------------------------- spend


def test_spend_is_the_agents_and_the_customers_calls_on_it_this_month(
    staff, alice, bob, llm_server
):
    vllm = team_vllm(llm_server, by=staff)
    other = openai_compatible_connection(llm_server, by=staff, name="Elsewhere")
    spent_run(user=alice, agent=vllm, cost=Decimal("0.30"))
    spent_run(user=alice, customer=vllm, user_cost=Decimal("0.05"), cost=Decimal("9"))
    spent_run(user=bob, agent=vllm, customer=vllm, cost=Decimal("0.10"), user_cost=Decimal("0.02"))
    spent_run(user=bob, agent=other, cost=Decimal("4"))  # another connection
    spent_run(user=alice, agent=vllm, cost=Decimal("7"), started=last_month())  # last month
    spent_run(user=alice, agent=vllm, cost=None, status=Run.Status.QUEUED, started=None)

    everyone = budgets.connection_spend(connection=vllm)
    assert everyone.spent == Decimal("0.47")  # 0.30 + 0.05 + 0.10 + 0.02
    assert budgets.connection_spend(connection=vllm, user=alice).spent == Decimal("0.35")
    assert budgets.connection_spend(connection=vllm, user=bob).spent == Decimal("0.12")
    assert budgets.connection_spend(connection=other).spent == Decimal("4")


def test_a_run_never_started_costs_nothing_and_a_month_is_utc(staff, alice, llm_server):
    vllm = team_vllm(llm_server, by=staff)
    start, end = budgets.month_window()
    spent_run(user=alice, agent=vllm, cost=Decimal("1"), started=start)
    spent_run(user=alice, agent=vllm, cost=Decimal("2"), started=start - timedelta(seconds=1))
    queued = spent_run(user=alice, agent=vllm, status=Run.Status.QUEUED)
    Run.objects.filter(pk=queued.pk).update(started_at=None)

    assert budgets.connection_spend(connection=vllm).spent == Decimal("1")
    assert start.tzinfo is not None and start.utcoffset() == timedelta(0)
    assert (start.day, start.hour, end.day) == (1, 0, 1)


def test_a_run_in_progress_counts_what_it_holds_until_it_ends(staff, alice, llm_server):
    vllm = team_vllm(llm_server, by=staff)
    going = spent_run(
        user=alice,
        agent=vllm,
        cost=Decimal("0.10"),
        status=Run.Status.RUNNING,
        agent_reserved_usd=Decimal("0.80"),
    )
    spent_run(user=alice, agent=vllm, cost=Decimal("0.25"))

    spend = budgets.connection_spend(connection=vllm)
    assert (spend.spent, spend.committed, spend.held) == (
        Decimal("0.35"),
        Decimal("1.05"),
        Decimal("0.70"),
    )
    Run.objects.filter(pk=going.pk).update(status=Run.Status.COMPLETED, cost_usd=Decimal("0.9"))
    spend = budgets.connection_spend(connection=vllm)
    assert (spend.spent, spend.committed) == (Decimal("1.15"), Decimal("1.15"))


# ------------------------------------------------------------------------ the panel


def render_spend(connection, viewer) -> str:
    request = RequestFactory().get("/connections/")
    request.user = viewer
    template = Template("{% load connection_budgets %}{% connection_spend connection %}")
    return template.render(Context({"request": request, "connection": connection}))


def test_the_panel_shows_the_month_the_budget_what_is_left_and_each_persons_spend(
    staff, alice, bob, llm_server
):
    vllm = team_vllm(
        llm_server,
        by=staff,
        monthly_budget_usd=Decimal("5.00"),
        person_monthly_budget_usd=Decimal("2.00"),
    )
    spent_run(user=alice, agent=vllm, cost=Decimal("1.25"))
    spent_run(user=bob, agent=vllm, cost=Decimal("0.40"))

    as_staff = render_spend(vllm, staff)
    assert 'data-testid="connection-spend"' in as_staff
    assert timezone.now().strftime("%B %Y") in as_staff
    assert "<strong>$1.65</strong>" in as_staff and "of its $5.00 monthly budget" in as_staff
    assert '<strong data-testid="spend-left">$3.35</strong> left' in as_staff
    assert as_staff.index("<td>alice</td><td>$1.25</td>") < as_staff.index(
        "<td>bob</td><td>$0.40</td>"
    )
    assert "You: <strong>$0</strong>" in as_staff  # stella spent nothing, truly

    as_alice = render_spend(vllm, alice)
    assert 'data-testid="spend-people"' not in as_alice  # who spent what: staff only
    assert "bob" not in as_alice
    assert "You: <strong>$1.25</strong>" in as_alice
    assert "of your $2.00 monthly budget" in as_alice
    assert '<strong data-testid="spend-my-left">$0.75</strong> left' in as_alice


def test_the_panel_never_shows_unpriced_calls_as_free(staff, alice, llm_server):
    vllm = openai_compatible_connection(llm_server, by=staff, name="Unpriced vLLM", models=[MODEL])
    spent_run(user=alice, agent=vllm, cost=None, tokens=(5000, 200))

    shown = render_spend(vllm, alice)
    assert "<strong>unpriced</strong>" in shown
    assert "no monthly budget" in shown
    assert "1 run used it unpriced this month: not counted." in shown
    assert "$0" not in shown


@pytest.mark.parametrize("budget", [None, Decimal("0.50")])
def test_the_panel_says_when_spend_went_past_the_budget_without_negative_money(
    staff, alice, llm_server, budget
):
    vllm = team_vllm(llm_server, by=staff, monthly_budget_usd=budget)
    spent_run(user=alice, agent=vllm, cost=Decimal("0.75"))

    shown = render_spend(vllm, alice)
    assert "<strong>$0.75</strong>" in shown
    if budget is None:
        assert "no monthly budget" in shown
    else:
        assert '<strong data-testid="spend-left">$0</strong> left' in shown
    assert "-$" not in shown and "$-" not in shown

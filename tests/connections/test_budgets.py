"""Budgets of connections: spend read from the runs, shown per connection and per person.

stella (staff) adds the team connection "Team vLLM" on the scripted server with a
budget; alice and bob run on it. Spend is what the runs that started this month (UTC)
cost on it — the agent's calls of runs whose agent is on it, the customer's of runs
whose customer is on it — never a second ledger.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connections
from django.template import Context, Template
from django.test import RequestFactory
from django.utils import timezone

from apps.connections.models import Connection
from apps.evaluations import selectors
from apps.evaluations.estimates import evaluation_cost_estimate
from apps.evaluations.models import Evaluation
from apps.evaluations.services import (
    IN_FLIGHT,
    TaskChoice,
    evaluation_create,
    evaluation_retry_failed,
)
from apps.play.services import play_retry, play_spec, play_start
from apps.runs import budgets
from apps.runs.models import Run
from apps.runs.runner import run_execute
from apps.runs.services import model_run_build
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tau2_env.engine.evaluation import trial_seeds
from tests.support import connections as with_connections
from tests.support.connections import openai_compatible_connection
from tests.support.llm_server import Reply
from tests.support.scripts import is_agent_request, wait_for

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


def test_the_nl_judges_calls_are_spent_where_it_judged(staff, alice, bob, llm_server):
    # τ²'s NL judge judges on the customer's route unless the run names a judge model;
    # its calls are spent on that connection, by the run's person.
    vllm = team_vllm(llm_server, by=staff)
    other = openai_compatible_connection(llm_server, by=staff, name="Elsewhere")
    judged = {"judge_prompt_tokens": 1000, "judge_completion_tokens": 10}
    spent_run(
        user=alice,
        customer=vllm,
        user_cost=Decimal("0.05"),
        judge_cost_usd=Decimal("0.01"),
        **judged,
    )
    spent_run(
        user=bob,
        customer=vllm,
        user_cost=Decimal("0.02"),
        judge_model=MODEL,
        judge_connection=other,
        judge_cost_usd=Decimal("0.50"),
        **judged,
    )
    spent_run(
        user=bob,
        customer=other,
        judge_model=MODEL,
        judge_connection=vllm,
        judge_cost_usd=Decimal("0.20"),
        **judged,
    )
    spent_run(user=alice, customer=vllm, user_cost=Decimal("0.01"), **judged)  # judge unpriced

    everyone = budgets.connection_spend(connection=vllm)
    assert everyone.spent == Decimal("0.29")  # 0.05 + 0.01, 0.02, 0.20, 0.01
    assert everyone.unpriced_runs == 1  # the judge's calls without a price, never $0
    assert budgets.connection_spend(connection=vllm, user=bob).spent == Decimal("0.22")
    assert budgets.connection_spend(connection=other).spent == Decimal("0.50")
    people = budgets.connection_spend_view(connection=vllm, viewer=staff).people
    assert {p.username: p.spend.spent for p in people} == {
        alice.username: Decimal("0.07"),
        bob.username: Decimal("0.22"),
    }


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


def test_a_run_playing_several_sides_unpriced_is_counted_once(staff, alice, bob, llm_server):
    """Issue 33: the connection page said 33 runs where 17 had run, each counted once per
    side it played there (agent, customer, judge). Runs are counted once, and the sides
    are said apart."""
    vllm = openai_compatible_connection(llm_server, by=staff, name="Unpriced vLLM", models=[MODEL])
    judged = {"judge_prompt_tokens": 1000, "judge_completion_tokens": 10}
    spent_run(user=alice, agent=vllm, customer=vllm, **judged)  # three sides, one run
    spent_run(user=bob, agent=vllm, customer=vllm)  # two sides
    spent_run(user=bob, agent=vllm)  # one side

    everyone = budgets.connection_spend(connection=vllm)
    assert everyone.unpriced_runs == 3
    assert everyone.unpriced_by_side == [("agent", 3), ("customer", 2), ("judge", 1)]
    assert budgets.connection_spend(connection=vllm, user=bob).unpriced_runs == 2
    people = budgets.connection_spend_view(connection=vllm, viewer=staff).people
    assert {p.username: p.spend.unpriced_runs for p in people} == {
        alice.username: 1,
        bob.username: 2,
    }
    shown = render_spend(vllm, staff)
    assert "3 runs used it unpriced this month" in shown
    assert "(3 as agent, 2 as customer, 1 as judge: a run can play several sides)" in shown


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


# ------------------------------------------------------------- runs on a budget

AGENT_LINE = "I can help you with that."
# One agent call of a run on Team vLLM: 100k input and 45k output tokens at $1 / $2 per
# 1M = $0.19, every time.
ONE_CALL = (100_000, 45_000)
PER_RUN = Decimal("0.19")


def short_conversation(llm) -> None:
    """The customer asks, the agent says one line (:data:`ONE_CALL` tokens), the customer
    ends with ###STOP###. Stateless: each reply follows from the request."""

    def responder(request):
        if is_agent_request(request):
            return Reply(content=AGENT_LINE, usage=ONE_CALL)
        if AGENT_LINE in request.text():
            return "Thanks, that's all. ###STOP###"
        return "Hi, I have a question about my booking."

    llm.responder = responder


def runs_before(*, user, connection, tokens, n: int = 3) -> None:
    """``n`` completed runs of airline/27 on ``connection``'s model that took ``tokens``,
    started last month: what a reservation goes by, and outside this month's spend."""
    for _ in range(n):
        spent_run(user=user, agent=connection, tokens=tokens, started=last_month())


def queued_on(connection, *, user, n: int = 1, customer=None) -> list[int]:
    """``n`` model runs of airline/27 by ``user``, the agent on ``connection`` (the
    customer on ``customer``, default the router on ``user``'s token), queued and sent to
    no worker: the test runs them."""
    task = Task.objects.get(domain_id="airline", task_id="27")
    runs = Run.objects.bulk_create(
        model_run_build(
            user=user,
            task=task,
            spec=RunSpec(
                agent=Side(MODEL, connection),
                customer=Side(MODEL if customer else ROUTER_MODEL, customer),
                max_steps=30,
                seed=300,
            ),
            trial=0,
            trial_seed=trial_seeds(300, 1)[0],
            prices=("1", "2"),
        )
        for _ in range(n)
    )
    return [run.pk for run in runs]


def execute(run_id: int, worker: str = "budget-test") -> str:
    """``run_execute`` on this thread, with its own database connection, closed after."""
    try:
        return run_execute(run_id=run_id, worker=worker)
    finally:
        connections.close_all()


def agent_calls(llm) -> int:
    return sum(1 for request in llm.chat_requests() if is_agent_request(request))


@pytest.mark.slow
def test_64_runs_at_once_against_a_budget_for_10_start_10_and_never_overspend(
    staff, alice, llm_server
):
    """The issue's target: 64 runs queued at once on 16 threads (each its own PostgreSQL
    connection) against a budget that has room for exactly 10 of them."""
    vllm = team_vllm(llm_server, by=staff, monthly_budget_usd=Decimal("2.00"))
    # What each run may cost, as admission reckons it: the team's runs on scripted-agent
    # took ONE_CALL, so the reservation is exactly one run's cost, $0.19; ten hold $1.90
    # and an eleventh would need $2.09.
    runs_before(user=alice, connection=vllm, tokens=ONE_CALL)
    short_conversation(llm_server)
    ids = queued_on(vllm, user=alice, n=64)

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(lambda pair: execute(pair[1], f"pool-{pair[0]}"), enumerate(ids)))

    runs = list(Run.objects.filter(pk__in=ids))
    assert sorted(outcomes).count(Run.Status.COMPLETED) == 10
    completed = [r for r in runs if r.status == Run.Status.COMPLETED]
    refused = [r for r in runs if r.status == Run.Status.FAILED]
    assert len(completed) == 10 and len(refused) == 54
    assert agent_calls(llm_server) == 10  # no run beyond the budget started
    for run in refused:
        assert run.failure == Run.Failure.BUDGET
        assert "The connection “Team vLLM” has $0.10 left of its $2.00 budget this month" in (
            run.error
        )
        assert "this run may cost up to $0.19 on it" in run.error
        assert "Raise the budget or wait for next month; then run it again." in run.error
        assert run.n_messages == 0 and run.started_at is None
        assert (run.agent_reserved_usd, run.cost_usd) == (None, None)
    for run in completed:
        assert run.cost_usd == PER_RUN and run.agent_reserved_usd == PER_RUN
    spent = budgets.connection_spend(connection=vllm).spent
    assert spent == Decimal("1.90")
    assert spent <= vllm.monthly_budget_usd + PER_RUN


def test_a_persons_budget_refuses_their_run_and_not_the_others(staff, alice, bob, llm_server):
    vllm = team_vllm(llm_server, by=staff, person_monthly_budget_usd=Decimal("0.50"))
    spent_run(user=bob, agent=vllm, cost=Decimal("0.45"))
    short_conversation(llm_server)
    [bobs] = queued_on(vllm, user=bob)
    [alices] = queued_on(vllm, user=alice)

    assert execute(bobs) == Run.Status.FAILED
    assert execute(alices) == Run.Status.COMPLETED

    bobs = Run.objects.get(pk=bobs)
    assert bobs.failure == Run.Failure.BUDGET
    assert bobs.error == (
        "bob's budget on the connection “Team vLLM” has $0.050 left of its $0.50 budget this "
        "month ($0.45 spent); this run may cost up to $0.42 on it (400k input and 10k output "
        "tokens, as the team has no completed runs of airline on scripted-agent to go by). "
        "Raise the budget or wait for next month; then run it again."
    )
    assert agent_calls(llm_server) == 1  # alice's
    assert budgets.connection_spend(connection=vllm, user=alice).spent == PER_RUN


def test_a_budgeted_connection_refuses_a_model_it_has_no_price_for(staff, alice, llm_server):
    vllm = openai_compatible_connection(
        llm_server,
        by=staff,
        name="Team vLLM",
        models=[MODEL],  # no price entered, none known
        monthly_budget_usd=Decimal("5.00"),
    )
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = Run.objects.create(
        task=task,
        domain="airline",
        created_by=alice,
        agent_model=MODEL,
        user_model=ROUTER_MODEL,
        agent_connection=vllm,
        max_steps=30,
    )

    assert execute(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert run.failure == Run.Failure.BUDGET
    assert "set a price for scripted-agent on the Connections page" in run.error
    assert not llm_server.chat_requests()
    with pytest.raises(ValidationError) as refused:
        evaluation_create(
            user=alice,
            spec=RunSpec(agent=Side(MODEL, vllm), customer=Side(ROUTER_MODEL)),
            tasks=TaskChoice(domain="airline", task_ids=["27"]),
            agent_prices=None,
        )
    assert "set a price for scripted-agent on the Connections page" in str(
        refused.value.message_dict["agent_model"]
    )


@pytest.mark.slow
def test_a_play_sessions_customer_waits_while_the_month_is_spent_and_answers_once_raised(
    celery_worker, staff, alice, llm_server
):
    # alice plays the agent; her customer runs on Team vLLM, whose month is spent by a
    # run of hers before: the customer's turn is not asked for, and she is told why.
    vllm = team_vllm(llm_server, by=staff, monthly_budget_usd=Decimal("1.00"))
    spent_run(user=alice, customer=vllm, user_cost=Decimal("1.20"))
    llm_server.responder = lambda request: "Hi, I'd like a certificate, please."
    task = Task.objects.get(domain_id="airline", task_id="27")

    run = play_start(user=alice, task=task, spec=play_spec(customer=Side(MODEL, vllm)))
    run = wait_for(run, lambda r: r.worker == "" and r.error, what="the refused turn")

    assert run.status == Run.Status.RUNNING and run.events.count() == 0
    assert run.error == (
        "The connection “Team vLLM” reached its $1.00 budget this month ($1.20 spent): the "
        "customer's turn waits, the conversation kept. Raise the budget or wait for next "
        "month; then ask the customer again."
    )
    assert not llm_server.chat_requests()

    Connection.objects.filter(pk=vllm.pk).update(monthly_budget_usd=Decimal("5.00"))
    play_retry(run=run)
    run = wait_for(run, lambda r: r.events.filter(kind="customer").exists(), what="the answer")

    assert run.error == "" and len(llm_server.chat_requests()) == 1
    assert run.events.get(kind="customer").message["content"].startswith("Hi, I'd like")


@pytest.mark.slow
def test_a_play_sessions_customer_on_a_budgeted_connection_needs_a_price(
    celery_worker, staff, alice, llm_server
):
    vllm = openai_compatible_connection(
        llm_server, by=staff, name="Team vLLM", models=[MODEL], monthly_budget_usd=Decimal("5")
    )
    task = Task.objects.get(domain_id="airline", task_id="27")

    run = play_start(user=alice, task=task, spec=play_spec(customer=Side(MODEL, vllm)))
    run = wait_for(run, lambda r: r.worker == "" and r.error, what="the refused turn")

    assert "set a price for scripted-agent on the Connections page" in run.error
    assert run.error.endswith("; then ask the customer again.")
    assert run.events.count() == 0 and not llm_server.chat_requests()


@pytest.mark.parametrize("whose", ["connection", "person"])
def test_an_evaluation_that_may_cost_more_than_is_left_is_refused_with_the_numbers(
    staff, alice, bob, llm_server, whose
):
    if whose == "connection":
        vllm = team_vllm(llm_server, by=staff, monthly_budget_usd=Decimal("0.50"))
        spent_run(user=bob, agent=vllm, cost=Decimal("0.40"))
        left = "The connection “Team vLLM” has $0.10 left of its $0.50 budget this month"
    else:
        vllm = team_vllm(llm_server, by=staff, person_monthly_budget_usd=Decimal("0.50"))
        spent_run(user=alice, agent=vllm, cost=Decimal("0.40"))
        spent_run(user=bob, agent=vllm, cost=Decimal("3.00"))  # bob's, not alice's
        left = "alice's budget on the connection “Team vLLM” has $0.10 left of its $0.50"
    before = Run.objects.count()

    with pytest.raises(ValidationError) as refused:
        evaluation_create(
            user=alice,
            spec=RunSpec(agent=Side(MODEL, vllm), customer=Side(ROUTER_MODEL)),
            tasks=TaskChoice(domain="airline", split="test"),  # 20 tasks
            agent_prices=PRICES,
        )

    # The evaluation's own estimate (no completed runs to go by): 50k–400k input and
    # 1k–10k output tokens per run at $1 / $2 per 1M, × 20 runs.
    expected = evaluation_cost_estimate(domain="airline", runs=20, prices=PRICES)
    assert (expected.low, expected.high) == (Decimal("1.04"), Decimal("8.40"))
    [message] = refused.value.message_dict["agent_model"]
    assert message.startswith(left)
    assert "this evaluation's 20 runs are estimated to cost $1.04 – $8.40 on it" in message
    assert "Raise the budget, wait for next month, or evaluate fewer tasks or trials." in message
    assert not Evaluation.objects.exists() and Run.objects.count() == before


def wait_until(evaluation, predicate, *, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while True:
        evaluation.refresh_from_db()
        if predicate(evaluation):
            return evaluation
        if time.monotonic() > deadline:
            runs = list(evaluation.runs.values_list("status", "error"))
            pytest.fail(f"evaluation {evaluation.status}: {runs}")
        time.sleep(0.2)


@pytest.mark.slow
def test_a_run_that_crosses_the_budget_stops_with_its_messages_and_is_retried_once_raised(
    celery_worker, staff, alice, llm_server
):
    vllm = team_vllm(llm_server, by=staff, monthly_budget_usd=Decimal("1.00"))
    ending = {"now": False}

    def responder(request):
        # Each agent call is 300k input tokens: $0.30. The customer goes on until told.
        if is_agent_request(request):
            return Reply(content=AGENT_LINE, usage=(300_000, 0))
        if ending["now"]:
            return "Thanks, that's all. ###STOP###"
        return "Please go on."

    llm_server.responder = responder
    evaluation = evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(MODEL, vllm), customer=Side(ROUTER_MODEL)),
        tasks=TaskChoice(domain="airline", task_ids=["27"]),
        agent_prices=PRICES,
    )
    evaluation = wait_until(evaluation, lambda e: e.status == Evaluation.Status.COMPLETED)

    # Admitted (it may cost up to $0.42, the stated default); its 4th agent call took the
    # spend to $1.20, and before the customer's next turn it stopped.
    [run] = evaluation.runs.all()
    assert (run.status, run.failure) == (Run.Status.FAILED, Run.Failure.BUDGET)
    assert run.error == (
        "The connection “Team vLLM” reached its $1.00 budget this month ($1.20 spent): the "
        "run stopped here, its messages kept. Raise the budget or wait for next month; then "
        "retry the failed runs."
    )
    assert run.termination_reason == "" and run.cost_usd == Decimal("1.2")
    kept = list(run.events.order_by("seq").values_list("kind", flat=True))
    assert kept == ["agent"] + ["customer", "agent"] * 4  # the greeting, then 4 exchanges
    assert agent_calls(llm_server) == 4
    assert selectors.evaluation_summary(evaluation).retryable == 1

    Connection.objects.filter(pk=vllm.pk).update(monthly_budget_usd=Decimal("5.00"))
    ending["now"] = True
    assert evaluation_retry_failed(evaluation=evaluation) == 1
    evaluation = wait_until(evaluation, lambda e: e.status == Evaluation.Status.COMPLETED)

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.error
    messages = list(run.events.order_by("seq").values_list("kind", "message"))
    assert [kind for kind, _ in messages] == kept + ["customer"]  # went on from where it was
    assert "###STOP###" in messages[-1][1]["content"]
    assert run.cost_usd == Decimal("1.2") and agent_calls(llm_server) == 4
    assert run.agent_reserved_usd == Decimal("0.42")  # admitted afresh when retried


@pytest.mark.slow
def test_an_evaluation_never_has_more_runs_in_flight_on_a_connection_than_it_allows(
    celery_worker, staff, alice, llm_server
):
    vllm = team_vllm(llm_server, by=staff, max_in_flight=2)
    seen: list[int] = []  # runs in flight on Team vLLM, as each agent request arrives
    short = {}
    short_conversation(llm_server)
    short["reply"] = llm_server.responder

    def responder(request):
        if is_agent_request(request):
            try:
                seen.append(Run.objects.filter(IN_FLIGHT, agent_connection=vllm).count())
            finally:
                connections.close_all()
        return short["reply"](request)

    llm_server.responder = responder
    evaluation = evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(MODEL, vllm), customer=Side(ROUTER_MODEL)),
        tasks=TaskChoice(domain="airline", task_ids=["27"]),
        agent_prices=PRICES,
        num_trials=6,
        concurrency=6,
    )
    evaluation = wait_until(evaluation, lambda e: e.status == Evaluation.Status.COMPLETED)

    assert evaluation.runs.filter(status=Run.Status.COMPLETED).count() == 6
    assert len(seen) == 6
    assert max(seen) == 2  # two at once: the cap, and never beyond it

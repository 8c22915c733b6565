"""τ²'s NL judge metered (role "judge"): on a retail task with NL assertions, judged with
TAU2_NL_JUDGE=always, the judge's tokens and cost are stored on the run, priced at the
judge's route (its own model on its connection, else the customer's), unpriced left
empty, never $0; the run page shows the judge as a role of the cost. Runs in-process with
``run_execute`` (the worker's code) against the scripted server, as
tests/connections/test_picker.py does; the meter reads answers only, so every request is
the one it was (tests/tau2_env/test_faithfulness.py keeps τ²'s own requests)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.inference.pricing import cost_usd
from apps.runs.models import Run
from apps.runs.runner import run_execute
from apps.runs.services import model_run_build
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tau2_env.engine.evaluation import trial_seeds
from tau2_env.llm import gateway
from tests.support.connections import openai_compatible_connection
from tests.support.llm_server import Reply, text
from tests.support.nl_judge import is_judge_request, judge_reply, judge_requests
from tests.support.scripts import is_agent_request

AGENT = "our-finetune-7b"
CUSTOMER = "our-customer-sim"
JUDGE_USAGE = (400, 60)


@pytest.fixture
def vllm(llm_server, staff):
    """A team connection offering a priced agent and a priced customer."""
    return openai_compatible_connection(
        llm_server,
        by=staff,
        models=[
            (AGENT, (Decimal("1"), Decimal("2"))),
            (CUSTOMER, (Decimal("0.5"), Decimal("1.5"))),
        ],
    )


@pytest.fixture
def judged(llm_server, monkeypatch):
    """The scripted server plays the agent, a customer who ends at once, and the judge."""
    monkeypatch.setenv("TAU2_NL_JUDGE", "always")

    def responder(request):
        if is_judge_request(request):
            return judge_reply(request, usage=JUDGE_USAGE)
        if is_agent_request(request) or request.body.get("tools"):
            return text("I cannot help with that, sorry.")
        return text("Fine, bye. ###STOP###")

    llm_server.responder = responder


def _run(alice, vllm, judge: Side | None = None) -> Run:
    run = model_run_build(
        user=alice,
        task=Task.objects.get(domain_id="retail", task_id="105"),
        spec=RunSpec(
            agent=Side(AGENT, vllm),
            customer=Side(CUSTOMER, vllm),
            judge=judge,
            max_steps=10,
            seed=300,
        ),
        trial=0,
        trial_seed=trial_seeds(300, 1)[0],
        prices=("1", "2"),
    )
    run.save()
    assert run_execute(run_id=run.pk, worker="test-judge-meter") == Run.Status.COMPLETED
    run.refresh_from_db()
    return run


def _judge_requests(llm_server):
    return judge_requests(llm_server)


def test_the_judges_tokens_and_cost_are_recorded_at_its_own_models_price(
    llm_server, judged, alice, alice_client, staff, vllm
):
    judge_host = openai_compatible_connection(
        llm_server,
        by=staff,
        name="Judge host",
        api_key="sk-judge-host-0123456789",
        models=[("judge-model", (Decimal("3"), Decimal("15")))],
    )
    run = _run(alice, vllm, judge=Side("judge-model", judge_host))
    calls = _judge_requests(llm_server)
    assert calls and run.reward_info["nl_assertions"]
    assert (run.judge_prompt_tokens, run.judge_completion_tokens) == (
        JUDGE_USAGE[0] * len(calls),
        JUDGE_USAGE[1] * len(calls),
    )
    assert run.judge_cost_usd == round(
        cost_usd(
            prompt_tokens=run.judge_prompt_tokens,
            completion_tokens=run.judge_completion_tokens,
            prices=(Decimal("3"), Decimal("15")),
        ),
        6,
    )
    # The agent's and the customer's tokens are theirs alone: every other request's.
    others = len(llm_server.chat_requests()) - len(calls)
    assert run.prompt_tokens + run.user_prompt_tokens == 10 * others
    assert run.completion_tokens + run.user_completion_tokens == 5 * others

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    cost = page[page.index('data-testid="cost-judge"') :][:200]
    assert cost.startswith('data-testid="cost-judge">judge $') and "460 tokens" in cost
    assert "judge not metered" not in page
    Run.objects.filter(pk=run.pk).delete()  # before the suite clears the connections


def test_a_judge_on_the_customers_route_is_priced_at_the_customers_prices(
    llm_server, judged, alice, vllm
):
    run = _run(alice, vllm)
    calls = _judge_requests(llm_server)
    assert calls and {r.body["model"] for r in calls} == {CUSTOMER}
    assert run.user_prices == (Decimal("0.5"), Decimal("1.5"))
    assert run.judge_prompt_tokens == JUDGE_USAGE[0] * len(calls)
    assert run.judge_cost_usd == round(
        cost_usd(
            prompt_tokens=run.judge_prompt_tokens,
            completion_tokens=run.judge_completion_tokens,
            prices=run.user_prices,
        ),
        6,
    )


def test_an_unpriced_judge_is_metered_but_never_said_free(
    llm_server, judged, alice, alice_client, vllm
):
    run = _run(alice, vllm, judge=Side("some-org/unlisted-judge"))
    assert run.judge_prompt_tokens and run.judge_cost_usd is None
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert page[page.index('data-testid="cost-judge"') :][:80].startswith(
        'data-testid="cost-judge">judge unpriced'
    )


def test_a_meter_counts_calls_by_role_and_sends_nothing_else(llm_server):
    route = gateway.hf_route(model="org/m", token="hf_meter_0123456789")
    llm_server.responder = lambda request: Reply(content="ok", usage=(7, 3))
    with gateway.conversation(user=route), gateway.metered() as outer:
        with gateway.metered() as inner:
            gateway.routed_completion(messages=[{"role": "user", "content": "hi"}])
        gateway.routed_completion(
            messages=[{"role": "user", "content": "hi"}], **{gateway.ROLE_KEY: gateway.ROLE_USER}
        )
    assert inner.of(gateway.ROLE_JUDGE) == gateway.Usage(
        prompt_tokens=7, completion_tokens=3, calls=1
    )
    assert outer.of(gateway.ROLE_JUDGE).calls == 1 and outer.of(gateway.ROLE_USER).tokens == 10
    assert outer.of(gateway.ROLE_AGENT) == gateway.Usage()
    first, second = llm_server.chat_requests()
    assert first.body == second.body  # the role is ours: never on the wire, nor the meter


def test_the_evaluation_page_says_what_the_judge_and_the_reviewers_cost(alice, alice_client, staff):
    from apps.runs.models import AutoReview
    from tests.support.evaluations import stored_evaluation

    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0, 1.0]})
    first, second, _ = evaluation.runs.order_by("trial")
    Run.objects.filter(pk=first.pk).update(
        judge_prompt_tokens=400, judge_completion_tokens=60, judge_cost_usd=Decimal("0.0021")
    )
    # A judge without a price: counted, and the sum says it is only the priced part.
    Run.objects.filter(pk=second.pk).update(judge_prompt_tokens=400, judge_completion_tokens=60)
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    judge = page[page.index('data-testid="evaluation-cost-judge"') :][:200]
    assert "NL judge: $0.0021 + unpriced · 920 tokens over 2 judged runs" in judge
    assert 'data-testid="evaluation-cost-reviewer">reviewer: no calls' in page
    assert 'data-testid="evaluation-autoreview-form"' not in page  # alice is no staff

    AutoReview.objects.create(
        run=first,
        requested_by=staff,
        reviewer_model="r/m",
        status=AutoReview.Status.DONE,
        prompt_tokens=900,
        completion_tokens=120,
        cost_usd=Decimal("0.0005"),
    )
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    reviewer = page[page.index('data-testid="evaluation-cost-reviewer"') :][:200]
    assert "reviewer: $0.00050 · 1,020 tokens over 1 review" in reviewer, reviewer

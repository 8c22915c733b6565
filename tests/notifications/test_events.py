"""Where notifications come from: an evaluation that finishes, fails, or has runs stopped
by a budget (or a start refused for one) queues one delivery per subscription that wants
it — once, however often the evaluations app is told, and never for a rolled-back state.

alice starts the evaluations; she has a webhook of her own, the team has one (stella,
staff, made it), and bob has one that must hear nothing of alice's evaluations. The
deliveries' ids are recorded instead of sent to the workers (``sent``): what the
workers do with them is ``test_delivery.py``'s.
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.evaluations import baselines, hooks
from apps.evaluations import services as evaluations
from apps.evaluations.models import Evaluation
from apps.notifications import services
from apps.notifications.models import Delivery, Event
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tests.notifications.support import subscribed
from tests.support.connections import CONNECTION_KEY, openai_compatible_connection
from tests.support.evaluations import stored_evaluation
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import AGENT_MODEL

URL = "https://hooks.example.org/tau2"


@pytest.fixture
def sent(monkeypatch) -> list[int]:
    ids: list[int] = []
    monkeypatch.setattr(services, "_send_later", ids.append)
    return ids


@pytest.fixture
def webhooks(alice, bob, staff, subscriptions_cleared):
    """alice's, the team's and bob's subscriptions to every event."""
    return {
        "alice": subscribed(alice, URL, name="alice's")[0],
        "team": subscribed(staff, URL, team=True, name="team")[0],
        "bob": subscribed(bob, URL, name="bob's")[0],
    }


@pytest.fixture
def evaluation(alice, settings, monkeypatch) -> Evaluation:
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 32
    monkeypatch.setattr(evaluations.queue, "run_enqueue", lambda run_id, **_: None)
    return evaluations.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=evaluations.TaskChoice(domain="airline", task_ids=["27", "2"]),
        num_trials=1,
    )


def _end_runs(evaluation: Evaluation, **columns) -> list[Run]:
    now = timezone.now()
    evaluation.runs.update(started_at=now, finished_at=now, **columns)
    return list(evaluation.runs.order_by("id"))


def _deliveries(event: str) -> dict[str, Delivery]:
    found = Delivery.objects.filter(event=event).select_related("subscription")
    return {d.subscription.name: d for d in found}


def test_the_notifications_app_hears_the_evaluations_news():
    assert "notifications" in hooks.news_hooks()


def test_a_finished_evaluation_is_told_once_to_its_starter_and_the_team(webhooks, evaluation, sent):
    runs = _end_runs(evaluation, status=Run.Status.COMPLETED, reward=1.0)

    for run in runs:  # every run's end is told; the last completes it
        evaluations.evaluation_run_settled(run_id=run.pk)
    evaluations.evaluation_run_settled(run_id=runs[-1].pk)  # told again: nothing new

    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.COMPLETED
    found = _deliveries(Event.FINISHED)
    assert sorted(found) == ["alice's", "team"]  # bob hears nothing of alice's
    assert sorted(sent) == sorted(d.pk for d in found.values())
    payload = found["team"].payload
    assert payload["version"] == 1 and payload["event"] == "evaluation.finished"
    facts = payload["evaluation"]
    assert facts["id"] == evaluation.pk and facts["status"] == "completed"
    assert facts["url"].endswith(f"/evaluations/{evaluation.pk}/")
    assert facts["agent_model"] == AGENT_MODEL and facts["domain"] == "airline"
    assert facts["pass_hat_k"] == {"1": 1.0}
    assert facts["counts"]["completed"] == 2 and facts["counts"]["successes"] == 2


def test_a_failed_evaluation_is_told_once_with_its_reason(webhooks, evaluation, sent):
    evaluations.evaluation_fail(evaluation_id=evaluation.pk, error="HTTP 402: no credits")
    evaluations.evaluation_fail(evaluation_id=evaluation.pk, error="HTTP 402: no credits")

    found = _deliveries(Event.FAILED)
    assert sorted(found) == ["alice's", "team"] and len(sent) == 2
    assert found["alice's"].payload["detail"] == "Stopped: HTTP 402: no credits"
    assert found["alice's"].payload["evaluation"]["status"] == "failed"


def test_runs_stopped_by_a_budget_are_told_once_per_evaluation(webhooks, evaluation, sent):
    error = "The connection “Team vLLM” reached its $5.00 budget this month"
    runs = _end_runs(evaluation, status=Run.Status.FAILED, failure=Run.Failure.BUDGET, error=error)

    for run in runs:
        evaluations.evaluation_run_settled(run_id=run.pk)

    found = _deliveries(Event.BUDGET)
    assert sorted(found) == ["alice's", "team"]
    assert found["team"].payload["detail"] == error
    assert not _deliveries(Event.FAILED)  # a budget's stop is not the provider refusing


def test_nothing_is_told_of_a_state_that_was_rolled_back(webhooks, evaluation, sent):
    runs = _end_runs(evaluation, status=Run.Status.COMPLETED, reward=1.0)

    with pytest.raises(RuntimeError), transaction.atomic():
        evaluations.evaluation_run_settled(run_id=runs[-1].pk)
        assert Evaluation.objects.get(pk=evaluation.pk).status == "completed"
        raise RuntimeError("the request failed after")

    assert not Delivery.objects.exists() and not sent


def test_a_start_refused_for_a_budget_is_told_to_who_tried(
    webhooks, alice, staff, llm_server, sent
):
    vllm = openai_compatible_connection(
        llm_server, by=staff, name="Team vLLM", monthly_budget_usd=Decimal("0.01")
    )

    with pytest.raises(ValidationError):
        evaluations.evaluation_create(
            user=alice,
            spec=RunSpec(agent=Side(vllm.models.get().name, vllm)),
            tasks=evaluations.TaskChoice(domain="airline", task_ids=["27", "2"]),
            agent_prices=(Decimal("1"), Decimal("2")),
        )

    found = _deliveries(Event.BUDGET)
    assert sorted(found) == ["alice's", "team"]
    payload = found["alice's"].payload
    assert payload["evaluation"] is None
    assert "“Team vLLM” has $0.010 left of its $0.010 budget" in payload["detail"]


TASKS = ("0", "1", "2", "3", "4", "5")


def _finishing(user, reward: float):
    """An evaluation of six tasks whose runs have all ended with ``reward``, still
    running until the evaluations app is told of its last run."""
    later = stored_evaluation(
        user,
        outcomes={task: [reward] for task in TASKS},
        agent_model="org/agent-b",
        status=Evaluation.Status.RUNNING,
    )
    evaluations.evaluation_run_settled(run_id=later.runs.last().pk)
    later.refresh_from_db()
    assert later.status == Evaluation.Status.COMPLETED
    return later


def test_finishing_worse_than_the_baseline_is_a_regression(alice, webhooks, sent):
    base = stored_evaluation(alice, outcomes={task: [1.0] for task in TASKS})
    baselines.baseline_pin(evaluation=base, by=alice)

    later = _finishing(alice, 0.0)

    assert sorted(_deliveries(Event.FINISHED)) == ["alice's", "team"]
    found = _deliveries(Event.REGRESSED)
    assert sorted(found) == ["alice's", "team"]
    payload = found["team"].payload
    assert payload["evaluation"]["id"] == later.pk
    verdict = payload["verdict"]
    assert verdict["outcome"] == "worse" and verdict["baseline"] == base.pk
    assert verdict["regressed"] == list(TASKS) and verdict["interval"][1] < 0
    assert payload["detail"].startswith(f"Worse than the baseline (evaluation {base.pk})")


def test_finishing_better_than_the_baseline_is_no_regression(alice, webhooks, sent):
    base = stored_evaluation(alice, outcomes={task: [0.0] for task in TASKS})
    baselines.baseline_pin(evaluation=base, by=alice)

    _finishing(alice, 1.0)

    assert sorted(_deliveries(Event.FINISHED)) == ["alice's", "team"]
    assert not _deliveries(Event.REGRESSED)


def test_a_regression_carries_the_verdict(webhooks, evaluation, sent):
    verdict = {
        "outcome": "worse",
        "label": "worse",
        "baseline": 7,
        "k": 1,
        "pass_hat_k": {"baseline": 0.8, "this": 0.5},
        "delta": -0.3,
        "interval": [-0.45, -0.12],
        "regressed": ["27"],
        "fixed": [],
        "sentence": "Worse than the baseline (evaluation 7): the baseline is ahead by 30 points.",
    }

    services.emit_regressed(evaluation, verdict)
    services.emit_regressed(evaluation, verdict)  # once per evaluation and baseline

    found = _deliveries(Event.REGRESSED)
    assert sorted(found) == ["alice's", "team"]
    payload = found["team"].payload
    assert payload["verdict"]["regressed"] == ["27"] and payload["verdict"]["baseline"] == 7
    assert payload["detail"].startswith("Worse than the baseline (evaluation 7)")


def test_no_payload_carries_a_token_a_key_or_a_secret(alice, staff, webhooks, llm_server, sent):
    vllm = openai_compatible_connection(llm_server, by=staff, name="Team vLLM")
    evaluation = evaluations.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(vllm.models.get().name, vllm)),
        tasks=evaluations.TaskChoice(domain="airline", task_ids=["27"]),
    )
    evaluations.evaluation_fail(evaluation_id=evaluation.pk, error="refused")
    _, secret = subscribed(alice, URL, name="another")

    delivery = Delivery.objects.filter(event=Event.FAILED).first()
    text = json.dumps(delivery.payload)
    for forbidden in (ALICE_TOKEN, CONNECTION_KEY, "CANARY", secret, "tau2wh_", "hooks.example"):
        assert forbidden not in text

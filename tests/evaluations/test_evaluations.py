"""An evaluation end to end on a real Celery worker: tasks × trials, seeds, metrics."""

from __future__ import annotations

import time

import pytest

from apps.evaluations import selectors, services
from apps.evaluations.models import Evaluation
from apps.evaluations.summary import EvaluationSummary
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tau2_env.engine.evaluation import compute_metrics, trial_seeds
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import AGENT_MODEL, gold_script

pytestmark = pytest.mark.slow


def wait_until(evaluation: Evaluation, predicate, *, timeout: float = 120.0) -> Evaluation:
    deadline = time.monotonic() + timeout
    while True:
        evaluation.refresh_from_db()
        if predicate(evaluation):
            return evaluation
        if time.monotonic() > deadline:
            runs = list(evaluation.runs.values_list("status", "error"))
            pytest.fail(f"evaluation {evaluation.status}: {runs}")
        time.sleep(0.2)


def test_an_evaluation_runs_every_task_and_trial_with_tau2s_seeds(celery_worker, llm_server, alice):
    gold_script(llm_server)  # solves airline/27; on task 2 the same moves are wrong
    evaluation = services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL), seed=300),
        tasks=services.TaskChoice(domain="airline", task_ids=["27", "2"]),
        num_trials=2,
        concurrency=2,
    )
    assert evaluation.runs.count() == 4 and evaluation.trial_seeds == trial_seeds(300, 2)

    evaluation = wait_until(evaluation, lambda e: e.status == Evaluation.Status.COMPLETED)

    runs = list(evaluation.runs.select_related("task").order_by("trial", "task__task_id"))
    assert [(r.task.task_id, r.trial) for r in runs] == [("2", 0), ("27", 0), ("2", 1), ("27", 1)]
    assert all(r.status == Run.Status.COMPLETED for r in runs)
    for run in runs:  # each trial's orchestrator got that trial's seed, as `tau2 run`
        assert run.seed == evaluation.trial_seeds[run.trial]
    sent = {r.body.get("seed") for r in llm_server.chat_requests()}
    assert sent == set(evaluation.trial_seeds)
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}

    rewards = {"27": [], "2": []}
    for run in runs:
        rewards[run.task.task_id].append(run.reward)
    assert rewards["27"] == [1.0, 1.0]
    expected = compute_metrics(rewards)
    summary = EvaluationSummary.from_json(evaluation.summary)
    assert summary.completed == 4 and summary.planned == 4
    assert summary.pass_hat_ks == expected.pass_hat_ks
    assert summary.avg_reward == pytest.approx(expected.avg_reward)
    matrix = selectors.evaluation_matrix(evaluation, selectors.evaluation_runs(evaluation))
    assert [row["task_id"] for row in matrix] == ["2", "27"]  # natural order (issue 21)
    assert matrix[1]["successes"] == 2 and len(matrix[1]["cells"]) == 2

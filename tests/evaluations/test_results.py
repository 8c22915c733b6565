"""An evaluation's downloads: τ²'s results format (read by τ²'s own ``Results`` and
metrics), the studio's JSON and the CSV — never with a token in them.

alice and bob (signed in) download; charlie (anonymous) may only when runs are public.
The runs' conversations are played through the engine with the scripted customer and
scored by τ²; one slow test downloads an evaluation the Celery worker ran end to end.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.test import Client, override_settings

from apps.evaluations import selectors
from apps.evaluations.summary import EvaluationSummary
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tau2_env.engine.evaluation import trial_seeds
from tests.support.evaluations import conversation, stored_evaluation, wait_for_evaluation
from tests.support.people import ALICE_TOKEN, BOB_TOKEN

SECRETS = (ALICE_TOKEN, BOB_TOKEN, "hf_oauth", "sk-agent-secret")


@pytest.fixture
def evaluation(alice, llm_server):
    """airline 19 × 3 trials (solved, solved, not) and 16 × 3 (not, a failed run, not).

    Both tasks expect a write on τ² 0.2 and 1.0.1 alike (a cancellation, a flight change),
    so a conversation that only greets leaves the database unchanged and scores 0 on both.
    """
    solved = conversation(llm_server, domain="airline", task_id="19", solve=True)
    unsolved = conversation(llm_server, domain="airline", task_id="19", solve=False)
    other = conversation(llm_server, domain="airline", task_id="16", solve=False)
    assert (solved.reward, unsolved.reward, other.reward) == (1.0, 0.0, 0.0)
    evaluation = stored_evaluation(
        alice,
        outcomes={"19": [solved, solved, unsolved], "16": [other, "failed", other]},
        split="",
        agent_model="org/agent-a:novita",
    )
    # A key that found its way into provenance must still never leave the server.
    evaluation.provenance["agent_args"] = {"api_key": "sk-agent-secret", "temperature": 0}
    evaluation.save(update_fields=["provenance"])
    return evaluation


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_the_tau2_download_loads_with_tau2s_results_and_its_metrics_equal_ours(
    alice_client, evaluation, tmp_path
):
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    response = alice_client.get(f"/evaluations/{evaluation.pk}.json?format=tau2")

    assert response.status_code == 200
    assert response["Content-Disposition"] == (
        f'attachment; filename="evaluation-{evaluation.pk}-tau2.json"'
    )
    assert_no_secret(response.content.decode())
    path = tmp_path / "results.json"
    path.write_bytes(response.content)
    results = Results.load(path)  # τ²'s own reader
    assert results.info.num_trials == 3 and results.info.seed == 300
    assert results.info.environment_info.domain_name == "airline"
    assert results.info.agent_info.llm == "org/agent-a:novita"
    assert results.info.agent_info.llm_args == {"temperature": 0}
    assert results.info.user_info.llm_args == {"temperature": 0}
    assert {t.id for t in results.tasks} == {"19", "16"}
    # One simulation per scored run, with its trial and the trial's seed, as τ² records.
    seeds = trial_seeds(300, 3)
    runs = {r.pk: r for r in Run.objects.filter(evaluation=evaluation, status=Run.Status.COMPLETED)}
    assert len(results.simulations) == len(runs) == 5
    for sim in results.simulations:
        run = runs[int(sim.id.rsplit("-", 1)[1])]
        assert (sim.task_id, sim.trial, sim.seed) == (run.task.task_id, run.trial, seeds[run.trial])
        assert sim.reward_info.reward == run.reward
        assert len(sim.messages) == run.events.count() > 0
        assert sim.agent_cost == float(run.cost_usd) and sim.duration == 12.0

    theirs = compute_metrics(results)
    ours = selectors.evaluation_summary(evaluation)
    assert ours.max_k == 2  # task 16 has only two scored trials: τ² stops there too
    assert ours.pass_hat_ks == theirs.pass_hat_ks
    assert ours.avg_reward == pytest.approx(theirs.avg_reward)


def test_tau2s_evaluator_scores_the_downloaded_conversations_as_they_were_scored(
    alice_client, evaluation
):
    from tau2.data_model.simulation import Results

    from tau2_env.engine import catalog
    from tau2_env.engine.results import rescore

    response = alice_client.get(f"/evaluations/{evaluation.pk}.json?format=tau2")
    results = Results.model_validate_json(response.content)
    for sim in results.simulations:
        verdict = rescore(
            domain="airline",
            task=catalog.get_tau2_task("airline", sim.task_id),
            simulation=sim,
            max_steps=results.info.max_steps,
            max_errors=results.info.max_errors,
        )
        assert verdict.status == "equal", verdict


def test_the_studio_json_has_the_settings_the_metrics_and_every_run_without_messages(
    bob_client, evaluation
):
    response = bob_client.get(f"/evaluations/{evaluation.pk}.json")

    assert response.status_code == 200
    text = response.content.decode()
    assert_no_secret(text)
    data = json.loads(text)
    assert data["format"] == "tau2-studio.evaluation" and data["id"] == evaluation.pk
    assert data["num_trials"] == 3 and data["seed"] == 300 and data["task_ids"] == ["19", "16"]
    assert data["trial_seeds"] == trial_seeds(300, 3)
    assert data["provenance"]["agent_args"] == {"temperature": 0}
    assert data["metrics"]["pass_hat_ks"] == selectors.evaluation_metrics(evaluation)["pass_hat_ks"]
    assert len(data["runs"]) == 6
    by_status = {}
    for run in data["runs"]:
        by_status.setdefault(run["status"], []).append(run)
        assert "messages" in run and isinstance(run["messages"], int)  # a count, not messages
        assert run["url"] == f"http://testserver/runs/{run['id']}/"
    assert len(by_status["completed"]) == 5 and len(by_status["failed"]) == 1
    assert by_status["failed"][0]["reward"] is None and by_status["failed"][0]["error"]


def test_the_csv_has_one_row_per_run_with_its_numbers_and_link(alice_client, evaluation):
    response = alice_client.get(f"/evaluations/{evaluation.pk}.csv")

    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert response["Content-Disposition"] == (
        f'attachment; filename="evaluation-{evaluation.pk}.csv"'
    )
    text = response.content.decode()
    assert_no_secret(text)
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == 6
    assert list(rows[0])[:12] == [
        "run_id",
        "task_id",
        "trial",
        "seed",
        "status",
        "reward",
        "termination_reason",
        "messages",
        "tool_calls",
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
    ]
    seeds = trial_seeds(300, 3)
    for row in rows:
        run = Run.objects.get(pk=int(row["run_id"]))
        assert (row["task_id"], int(row["trial"]), int(row["seed"])) == (
            run.task.task_id,
            run.trial,
            seeds[run.trial],
        )
        assert row["run_url"] == f"http://testserver/runs/{run.pk}/"
        assert row["status"] == run.status and int(row["messages"]) == run.n_messages
        assert row["reward"] == ("" if run.reward is None else str(run.reward))
        assert row["duration_s"] == "12.0" and row["cost_usd"] == "0.001000"
    solved = [r for r in rows if r["task_id"] == "19" and r["reward"] == "1.0"]
    assert len(solved) == 2 and all(int(r["tool_calls"]) > 0 for r in solved)


def test_charlie_downloads_nothing_unless_runs_are_public(evaluation):
    charlie = Client()
    paths = [
        f"/evaluations/{evaluation.pk}.json",
        f"/evaluations/{evaluation.pk}.json?format=tau2",
        f"/evaluations/{evaluation.pk}.csv",
    ]
    assert [charlie.get(p).status_code for p in paths] == [403, 403, 403]
    with override_settings(TAU2_PUBLIC_RUNS=True):
        assert [charlie.get(p).status_code for p in paths] == [200, 200, 200]


def test_an_unknown_format_or_evaluation_is_not_found(alice_client, evaluation):
    assert alice_client.get(f"/evaluations/{evaluation.pk}.json?format=xml").status_code == 404
    assert alice_client.get(f"/evaluations/{evaluation.pk + 1000}.csv").status_code == 404


@pytest.mark.slow
def test_an_evaluation_the_worker_ran_downloads_as_a_tau2_file_with_the_same_pass_hat_k(
    celery_worker, llm_server, alice, alice_client
):
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    from apps.evaluations import services
    from apps.evaluations.models import Evaluation
    from tests.support.scripts import AGENT_MODEL, gold_script

    gold_script(llm_server)
    evaluation = services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL), seed=300),
        tasks=services.TaskChoice(domain="airline", task_ids=["27", "2"]),
        num_trials=2,
        concurrency=2,
    )
    evaluation = wait_for_evaluation(evaluation, lambda e: e.status == Evaluation.Status.COMPLETED)

    response = alice_client.get(f"/evaluations/{evaluation.pk}.json?format=tau2")
    assert_no_secret(response.content.decode())
    results = Results.model_validate_json(response.content)
    assert sorted((s.task_id, s.trial, s.seed) for s in results.simulations) == sorted(
        (t, trial, seed) for t in ("27", "2") for trial, seed in enumerate(trial_seeds(300, 2))
    )
    summary = EvaluationSummary.from_json(evaluation.summary)
    assert summary.pass_hat_ks == compute_metrics(results).pass_hat_ks


def test_a_failed_conversation_is_in_the_tau2_download_as_reward_0_as_tau2_counts_it(
    alice_client, evaluation, tmp_path
):
    """The model's own failure (the conversation went wrong) counts as reward 0 on the
    page, as τ² counts it: the download holds it too, so τ² computes the same pass^k;
    a transient failure (the provider's) is left out of both."""
    from tau2.data_model.simulation import Results
    from tau2.metrics.agent_metrics import compute_metrics

    failed = Run.objects.get(evaluation=evaluation, status=Run.Status.FAILED)
    failed.failure = Run.Failure.CONVERSATION
    failed.termination_reason = "agent_error"
    failed.save(update_fields=["failure", "termination_reason"])
    path = tmp_path / "results.json"
    path.write_bytes(alice_client.get(f"/evaluations/{evaluation.pk}.json?format=tau2").content)
    results = Results.load(path)
    assert len(results.simulations) == 6
    (sim,) = [s for s in results.simulations if s.id == f"tau2-studio-run-{failed.pk}"]
    assert sim.reward_info.reward == 0.0 and sim.termination_reason == "agent_error"
    theirs = compute_metrics(results)
    ours = selectors.evaluation_summary(evaluation)
    assert ours.max_k == 3 and ours.pass_hat_ks == theirs.pass_hat_ks
    assert ours.avg_reward == pytest.approx(theirs.avg_reward)

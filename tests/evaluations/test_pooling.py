"""Honest pooling and ranking (issue 21 item 2): what is ranked together, the same file
imported twice counted once, the runs left out and why, components over every scored
run, task ids in natural order, costs that say per what and whose; and the paper's
published rows, never ranked (item 8).

alice and bob store finished evaluations; alice reads the leaderboard and the pages.
"""

from __future__ import annotations

import csv
import io
import json
from decimal import Decimal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.evaluations import presenters, selectors
from apps.evaluations.imports import evaluation_import
from apps.evaluations.leaderboard import leaderboard, published
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tau2_env.engine import catalog
from tests.support.evaluations import results_file, stored_evaluation
from tests.support.jobs import followed

TEST_SPLIT = list(catalog.get_domain("airline").splits["test"])


def everything(outcome):
    return {t: outcome for t in TEST_SPLIT}


def test_other_limits_another_mode_or_another_tau2_are_ranked_apart_and_say_so(alice, alice_client):
    base = stored_evaluation(alice, agent_model="org/a", outcomes=everything([1.0, 0.0]))
    short = stored_evaluation(alice, agent_model="org/b", outcomes=everything([1.0, 1.0]))
    solo = stored_evaluation(alice, agent_model="org/c", outcomes=everything([1.0, 1.0]))
    older = stored_evaluation(alice, agent_model="org/d", outcomes=everything([1.0, 1.0]))
    same = stored_evaluation(alice, agent_model="org/e", outcomes=everything([0.0, 0.0]))
    Evaluation.objects.filter(pk=short.pk).update(max_steps=10)
    Evaluation.objects.filter(pk=solo.pk).update(mode="no_user")
    older.provenance["tau2_version"] = "0.0.1"
    older.save(update_fields=["provenance"])

    groups = leaderboard(domain="airline")

    assert [r.agent_model for r in groups[0].rows] == ["org/a", "org/e"]
    apart = {g.rows[0].agent_model: g.reason for g in groups[1:]}
    assert "other limits (10 steps and 10 tool errors, not 30 and 10)" in apart["org/b"]
    assert "another mode (No-User, not default)" in apart["org/c"]
    assert "another τ² version (0.0.1, not " in apart["org/d"]
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert page.count('data-testid="leaderboard-group"') == 4
    assert 'data-limits="10/10"' in page and 'data-mode="no_user"' in page
    assert base.pk and same.pk


def test_the_compare_page_shows_the_limits_and_says_what_differs(alice, alice_client):
    a = stored_evaluation(alice, agent_model="org/a", outcomes=everything([1.0]))
    b = stored_evaluation(alice, agent_model="org/b", outcomes=everything([1.0]))
    Evaluation.objects.filter(pk=b.pk).update(max_steps=10)

    page = alice_client.get(f"/evaluations/compare/?ids={a.pk},{b.pk}").content.decode()

    assert "30 steps, 10 tool errors" in page and "10 steps, 10 tool errors" in page
    assert 'data-testid="compare-differs"' in page
    assert "other limits (10 steps and 10 tool errors, not 30 and 10)" in page


def _import(alice, data: dict) -> Evaluation:
    return evaluation_import(user=alice, data=json.dumps(data).encode())


def test_the_same_file_imported_twice_is_recognised_and_never_pooled_as_new_trials(
    alice, alice_client
):
    data = results_file(num_trials=2, simulations=2)
    first = _import(alice, data)
    second = _import(alice, data)
    other = results_file(num_trials=2, simulations=2)
    other["simulations"][0]["id"] = "another-simulation"
    third = _import(alice, other)

    hashes = [
        sorted(
            Run.objects.filter(evaluation=e).values_list("provenance__simulation_hash", flat=True)
        )
        for e in (first, second, third)
    ]
    assert hashes[0] == hashes[1] and all(len(h) == 64 for h in hashes[0])
    assert len(set(hashes[0]) & set(hashes[2])) == 1  # one simulation in common
    assert first.provenance["simulations_hash"] == second.provenance["simulations_hash"]
    assert third.provenance["simulations_hash"] != first.provenance["simulations_hash"]
    assert first.provenance["import"]["repeats"] == {}
    assert second.provenance["import"]["repeats"] == {str(first.pk): 2}
    assert third.provenance["import"]["repeats"] == {str(first.pk): 1, str(second.pk): 1}

    # Ranked as if whole splits: one row, each simulation once.
    Evaluation.objects.filter(pk__in=[first.pk, second.pk, third.pk]).update(
        full_split=True, split="test"
    )
    (group,) = leaderboard(domain="airline")
    (row,) = group.rows
    assert row.runs == 3 and row.duplicates == 3
    assert row.duplicate_notes == [
        f"#{second.pk}'s 2 simulations repeat #{first.pk}'s (the same file imported again): "
        "counted once",
        f"#{third.pk}'s 1 simulation repeats #{first.pk}'s (the same file imported again): "
        "counted once",
    ]
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert page.count('data-testid="duplicate"') == 2


def test_the_import_page_says_the_simulations_were_imported_before(alice, alice_client, held_jobs):
    data = json.dumps(results_file()).encode()
    first = evaluation_import(user=alice, data=data)

    response = alice_client.post(
        "/evaluations/import/",
        {"file": SimpleUploadedFile("r.json", data, content_type="application/json")},
    )
    _, page = followed(alice_client, response, held_jobs)  # the import job's page, done

    assert f"imported before (#{first.pk}: 1)" in page
    assert "counts each simulation once, never as new trials" in page


@pytest.fixture
def failures(alice):
    """Task 27: a success and a conversation failure (the model's: reward 0); task 2: a
    success, an infrastructure failure, a budget failure and a stopped run (left out)."""
    evaluation = stored_evaluation(
        alice, outcomes={"27": [1.0, "failed"], "2": [1.0, "failed", "failed", "failed"]}
    )
    runs = Run.objects.filter(evaluation=evaluation, status=Run.Status.FAILED)
    runs.filter(task__task_id="27").update(failure=Run.Failure.CONVERSATION)
    runs.filter(task__task_id="2", trial=1).update(failure=Run.Failure.INFRASTRUCTURE)
    runs.filter(task__task_id="2", trial=2).update(failure=Run.Failure.BUDGET)
    runs.filter(task__task_id="2", trial=3).update(status=Run.Status.STOPPED, failure="")
    return evaluation


def test_a_models_own_failure_counts_as_zero_and_the_rest_are_left_out_with_why(
    failures, alice_client
):
    summary = selectors.evaluation_summary(failures)

    # τ²: 27 has 1 of 2 (the failure scores 0), 2 has 1 of 1 → (0.5 + 1) / 2.
    assert summary.pass_hat_ks == {1: 0.75}
    assert (summary.scored_runs, summary.failures_counted) == (3, 1)
    assert summary.left_out == {"infrastructure": 1, "budget": 1, "stopped": 1}
    assert summary.avg_reward == pytest.approx(2 / 3)
    page = alice_client.get(f"/evaluations/{failures.pk}/").content.decode()
    assert 'data-testid="scored-runs">3<' in page
    assert "1 infrastructure failure (database, broker or worker)" in page
    assert "1 a connection&#x27;s monthly budget was reached" in page
    assert "1 stopped before it ended" in page


def test_the_leaderboard_row_counts_the_same_way_and_says_what_it_left_out(alice, alice_client):
    evaluation = stored_evaluation(alice, outcomes=everything([1.0, "failed"]))
    runs = Run.objects.filter(evaluation=evaluation, status=Run.Status.FAILED)
    runs.filter(task__task_id__in=TEST_SPLIT[:5]).update(failure=Run.Failure.CONVERSATION)

    (row,) = leaderboard(domain="airline")[0].rows

    assert row.runs == 20 + 5 and row.failures_counted == 5
    assert row.pass_1 == pytest.approx((15 * 1.0 + 5 * 0.5) / 20)
    assert row.left_out == {"transient": 15}
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert "15 left out: 15 provider errors or rate limits that outlasted the retries" in page
    assert "5 failed conversations at reward 0" in page


def test_reward_per_component_is_over_every_scored_run(alice, alice_client):
    # As found: two runs scored DB 1 and COMMUNICATE 1; two hit the step limit (reward 0,
    # no breakdown). The components are 0.5 each, like the average reward.
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0], "2": [1.0, 0.0]})
    runs = Run.objects.filter(evaluation=evaluation)
    runs.filter(trial=0).update(
        reward_info={
            "reward": 1.0,
            "reward_basis": ["DB", "COMMUNICATE"],
            "reward_breakdown": {"DB": 1.0, "COMMUNICATE": 1.0},
        }
    )
    runs.filter(trial=1).update(
        termination_reason="max_steps", reward_info={"reward": 0.0, "reward_basis": None}
    )

    summary = selectors.evaluation_summary(evaluation)

    assert summary.avg_reward == 0.5
    assert summary.reward_by_basis == {"COMMUNICATE": 0.5, "DB": 0.5}
    assert (summary.basis_runs, summary.basis_without_breakdown) == (4, 2)
    page = presenters._compute(evaluation).head["metrics_html"]
    assert "over 4 scored runs" in page and "2 without a breakdown" in page


def test_task_ids_sort_naturally_in_the_matrix_the_csv_and_compare(alice, alice_client):
    ids = ["13", "2", "19", "16", "18"]
    evaluation = stored_evaluation(alice, outcomes={t: [1.0] for t in ids})

    matrix = presenters.matrix_payload(evaluation, selectors.evaluation_runs(evaluation))
    assert matrix["tasks"] == ["2", "13", "16", "18", "19"]
    text = alice_client.get(f"/evaluations/{evaluation.pk}.csv").content.decode()
    assert [row["task_id"] for row in csv.DictReader(io.StringIO(text))] == matrix["tasks"]
    rows = selectors.evaluation_compare(evaluation, evaluation)
    assert [r["task_id"] for r in rows] == matrix["tasks"]
    summary = selectors.evaluation_summary(evaluation)
    assert [r.task_id for r in summary.reward_by_task] == matrix["tasks"]


def test_the_leaderboard_cost_is_per_run_and_names_every_role(alice, alice_client):
    evaluation = stored_evaluation(alice, outcomes=everything([1.0]))
    Run.objects.filter(evaluation=evaluation).update(
        user_prompt_tokens=10,
        user_cost_usd=Decimal("0.002"),
        judge_prompt_tokens=5,
        judge_cost_usd=Decimal("0.0005"),
    )

    (row,) = leaderboard(domain="airline")[0].rows

    assert row.cost_per_run == Decimal("0.0035") and row.agent_cost_per_run == Decimal("0.001")
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert "Cost per run" in page and "agent + customer + judge" in page
    assert "Cost / task" not in page
    assert 'data-testid="agent-cost-per-run">agent alone $0.0010<' in page


def test_the_papers_rows_are_shown_apart_marked_and_never_ranked(alice, alice_client):
    stored_evaluation(alice, agent_model="org/a", outcomes=everything([1.0]))

    rows = published(domain="airline")
    assert [p.agent_model for p in rows] == ["claude-3.7-sonnet", "gpt-4.1", "o4-mini"]
    assert [p.pass_1 for p in rows] == pytest.approx([0.642, 0.56, 0.521])
    assert [p.pass_1 for p in published(domain="retail")] == pytest.approx([0.74, 0.721, 0.683])
    assert [p.pass_1 for p in published(domain="telecom")] == pytest.approx([0.502, 0.49, 0.34])
    assert published(domain="mock") == []
    (group,) = leaderboard(domain="airline")
    assert [r.agent_model for r in group.rows] == ["org/a"]
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    section = page.split('data-testid="published"')[1]
    assert section.count('data-testid="published-row"') == 3
    assert section.count("published, not run here") >= 3
    assert 'href="https://taubench.com/research"' in section
    assert "<details" in page.split('data-testid="published"')[0][-40:]  # behind a toggle
    assert 'data-testid="leaderboard-row"' not in section

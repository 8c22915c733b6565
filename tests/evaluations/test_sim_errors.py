"""pass^k with and without critical user-simulator errors (issue 21 item 4): on the
evaluation page, on compare and on every leaderboard row, with the count of each.

A run has a critical user-simulator error when a person labelled it so (origin human),
or accepted an auto-review finding saying so; a pending or dismissed finding, a benign
one or another category does not count. alice owns the evaluations; bob labels.
"""

from __future__ import annotations

import pytest

from apps.evaluations import presenters, selectors
from apps.evaluations.leaderboard import leaderboard
from apps.runs.models import AutoReview, ReviewLabel, Run
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import compute_metrics
from tests.support.evaluations import stored_evaluation

TEST_SPLIT = list(catalog.get_domain("airline").splits["test"])


def label(
    run: Run,
    *,
    by,
    origin="human",
    status="accepted",
    category="user_sim_error",
    severity="critical",
) -> ReviewLabel:
    review = None
    if origin == "auto":
        review = AutoReview.objects.create(run=run, requested_by=by, reviewer_model="org/reviewer")
    return ReviewLabel.objects.create(
        run=run,
        category=category,
        severity=severity,
        origin=origin,
        status=status,
        source="user",
        auto_review=review,
        created_by=by,
    )


def failed_run(evaluation, task_id: str, trial: int) -> Run:
    return Run.objects.get(evaluation=evaluation, task__task_id=task_id, trial=trial)


@pytest.fixture
def evaluation(alice, bob):
    """27: 1, 0, 1 · 2: 0, 0, 1. Task 27 trial 1 and task 2 trial 0 failed because the
    simulated customer went wrong (a person's label; an accepted finding); other labels
    that must not count: a pending and a dismissed finding, a benign error, an agent
    error."""
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0, 0.0, 1.0], "2": [0.0, 0.0, 1.0]})
    label(failed_run(evaluation, "27", 1), by=bob)
    label(failed_run(evaluation, "2", 0), by=bob, origin="auto", status="accepted")
    label(failed_run(evaluation, "2", 1), by=bob, origin="auto", status="pending")
    label(failed_run(evaluation, "2", 1), by=bob, origin="auto", status="dismissed")
    label(failed_run(evaluation, "2", 1), by=bob, severity="benign")
    label(failed_run(evaluation, "2", 1), by=bob, category="agent_error")
    return evaluation


def test_only_critical_simulator_errors_of_a_person_or_accepted_count(evaluation):
    flagged = selectors.sim_error_run_ids(evaluation_ids=[evaluation.pk])

    assert flagged == {failed_run(evaluation, "27", 1).pk, failed_run(evaluation, "2", 0).pk}


def test_the_summary_has_pass_hat_k_over_all_runs_and_without_them(evaluation):
    summary = selectors.evaluation_summary(evaluation)

    every = {"27": [1.0, 0.0, 1.0], "2": [0.0, 0.0, 1.0]}
    without = {"27": [1.0, 1.0], "2": [0.0, 1.0]}
    assert summary.pass_hat_ks == compute_metrics(every).pass_hat_ks
    assert summary.clean_pass_hat_ks == compute_metrics(without).pass_hat_ks
    assert summary.clean_pass_hat_ks == {1: 0.75, 2: 0.5}  # k up to their fewest trials
    assert (summary.scored_runs, summary.sim_error_runs, summary.clean_runs) == (6, 2, 4)


def test_the_evaluation_page_shows_both_with_their_counts_and_follows_the_labels(
    evaluation, alice_client, bob
):
    html = presenters.evaluation_state(evaluation).head["metrics_html"]
    assert 'data-testid="clean-runs">(4; 2 with one)' in html
    assert 'data-testid="clean-value-1">0.750<' in html

    # A finding dismissed later: the page (kept state) follows.
    ReviewLabel.objects.filter(origin="auto", status="accepted").update(status="dismissed")
    html = presenters.evaluation_state(evaluation).head["metrics_html"]
    assert 'data-testid="clean-runs">(5; 1 with one)' in html
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert 'data-testid="clean-runs">(5; 1 with one)' in page


def test_compare_shows_both_sides_with_and_without_and_the_difference_of_each(
    evaluation, alice, alice_client
):
    other = stored_evaluation(alice, outcomes={"27": [1.0, 1.0, 1.0], "2": [1.0, 1.0, 1.0]})

    page = alice_client.get(f"/evaluations/compare/?ids={evaluation.pk},{other.pk}").content
    page = page.decode()

    assert page.count('data-testid="sim-errors"') == 2
    assert 'data-testid="clean-runs">(4; 2 with one)' in page
    assert 'data-testid="clean-runs">(6; 0 with one)' in page
    significance = selectors.evaluation_compare_significance(evaluation, other)
    assert significance.sim_errors == (2, 0)
    assert significance.differences[0].delta == pytest.approx(1 - 0.5)
    assert significance.clean_differences[0].delta == pytest.approx(1 - 0.75)
    assert 'data-testid="clean-difference-1"' in page
    assert "Without the runs with a critical user-simulator error (A 2, B 0)" in page


def test_every_leaderboard_row_has_pass_1_without_them_with_the_counts(alice, bob, alice_client):
    evaluation = stored_evaluation(
        alice, agent_model="org/a", outcomes={t: [0.0] for t in TEST_SPLIT}
    )
    for task_id in TEST_SPLIT[:4]:
        label(failed_run(evaluation, task_id, 0), by=bob)

    (row,) = leaderboard(domain="airline")[0].rows

    assert (row.runs, row.sim_error_runs, row.clean_runs) == (20, 4, 16)
    assert row.pass_1 == 0.0 and row.clean_scores[0].value == 0.0
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert "16 runs; 4 with a critical user-simulator error" in page

    # The labels are part of what the board keeps: dismissing one shows at once.
    ReviewLabel.objects.filter(run__task__task_id=TEST_SPLIT[0]).delete()
    (row,) = leaderboard(domain="airline")[0].rows
    assert (row.sim_error_runs, row.clean_runs) == (3, 17)

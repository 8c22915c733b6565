"""Whether a difference is real, and how many trials would make it so (issue 21 item 1)."""

from __future__ import annotations

import itertools
import math

import pytest

from apps.evaluations.significance import (
    DEFAULT_TRIAL_VARIANCE,
    Difference,
    Planner,
    difference_sentence,
    paired_difference,
    percentile_interval,
    planned_half_width,
    task_order,
    trial_variance,
)


def test_a_difference_every_task_shares_has_an_interval_of_one_point():
    a = {"1": [1.0, 0.0], "2": [0.0, 0.0], "3": [1.0, 1.0]}
    b = {"1": [1.0, 1.0], "2": [1.0, 0.0], "3": [1.0, 1.0, 1.0]}
    # Per task b − a: +0.5, +0.5, 0.0 → the mean +1/3; the resampled means lie in [0, 0.5].
    d = paired_difference(a, b, k=1)
    assert d.delta == pytest.approx(1 / 3)
    assert d.tasks == 3
    assert 0.0 <= d.low <= d.delta <= d.high <= 0.5


def test_the_interval_matches_the_brute_force_bootstrap_distribution():
    # Five tasks: every one of the 5^5 resamples enumerated gives the exact bootstrap
    # distribution; the seeded Monte Carlo interval lands on its percentiles.
    a = {
        "1": [1, 0, 0, 0],
        "2": [1, 1, 1, 1],
        "3": [0, 0, 0, 0],
        "4": [1, 1, 0, 0],
        "5": [1, 0, 1, 1],
    }
    b = {
        "1": [1, 1, 1, 0],
        "2": [1, 1, 1, 1],
        "3": [1, 0, 0, 0],
        "4": [0, 0, 0, 0],
        "5": [1, 1, 1, 1],
    }
    deltas = [0.5, 0.0, 0.25, -0.5, 0.25]
    exact = sorted(sum(pick) / 5 for pick in itertools.product(deltas, repeat=5))
    low, high = percentile_interval(exact, 0.95)
    d = paired_difference(
        {t: [float(x) for x in v] for t, v in a.items()},
        {t: [float(x) for x in v] for t, v in b.items()},
        k=1,
        samples=20000,
    )
    assert d.delta == pytest.approx(sum(deltas) / 5)
    assert d.low == pytest.approx(low, abs=0.051)
    assert d.high == pytest.approx(high, abs=0.051)
    assert (low, high) == (pytest.approx(-0.2), pytest.approx(0.35))


def test_the_interval_is_the_same_every_time_and_whatever_the_order_of_tasks():
    a = {str(i): [float(i % 3 == 0), float(i % 2 == 0)] for i in range(40)}
    b = {str(i): [float(i % 5 != 0), 1.0] for i in range(40)}
    reordered = dict(reversed(list(b.items())))
    first = paired_difference(a, b)
    assert paired_difference(a, b) == first
    assert paired_difference(a, reordered) == first
    assert paired_difference(a, b, seed=1) != first


def test_pass_hat_k_differences_use_only_tasks_with_k_trials_on_both_sides():
    a = {"1": [1.0, 1.0], "2": [1.0]}
    b = {"1": [1.0, 0.0], "2": [0.0, 0.0]}
    d = paired_difference(a, b, k=2)
    assert d.tasks == 1
    assert (d.a, d.b, d.delta) == (1.0, 0.0, -1.0)
    assert paired_difference({"1": [1.0]}, {"1": [1.0]}, k=2) is None
    assert paired_difference({"1": [1.0]}, {"9": [1.0]}) is None


def test_a_failure_without_a_reward_counts_as_zero():
    d = paired_difference({"1": [None]}, {"1": [1.0]})
    assert d.delta == 1.0


@pytest.mark.parametrize(
    ("delta", "low", "high", "expected"),
    [
        (
            0.06,
            -0.02,
            0.14,
            "B is ahead by 6 points, 95% CI −2 to +14: "
            "not distinguishable at this size (50 tasks).",
        ),
        (
            -0.12,
            -0.2,
            -0.04,
            "A is ahead by 12 points, 95% CI −20 to −4: a real difference at 95% (50 tasks).",
        ),
        (
            0.0,
            -0.05,
            0.05,
            "A and B are level on pass^1, 95% CI −5 to +5: "
            "not distinguishable at this size (50 tasks).",
        ),
        (
            0.01,
            0.0,
            0.02,
            "B is ahead by 1 point, 95% CI 0 to +2: not distinguishable at this size (50 tasks).",
        ),
    ],
)
def test_the_sentence_says_who_is_ahead_by_how_much_and_whether_it_is_real(
    delta, low, high, expected
):
    d = Difference(k=1, a=0.5, b=0.5 + delta, delta=delta, low=low, high=high, tasks=50)
    assert difference_sentence(d) == expected


def test_trial_variance_is_the_unbiased_bernoulli_variance_averaged_over_tasks():
    # 2 of 4: 2·2/(4·3) = 1/3; 4 of 4: 0; a single trial says nothing and is left out.
    assert trial_variance([[True, True, False, False], [True] * 4, [True]]) == (
        pytest.approx(1 / 6),
        2,
    )
    assert trial_variance([[True], []]) is None


def test_the_planner_half_width_shrinks_with_the_square_root_of_the_runs():
    one = planned_half_width(tasks=50, trials=4, variance=0.1)
    assert one == pytest.approx(1.96 * math.sqrt(0.1 / 200), rel=1e-3)
    assert planned_half_width(tasks=50, trials=16, variance=0.1) == pytest.approx(one / 2)
    planner = Planner(tasks=50, trials=4, variance=DEFAULT_TRIAL_VARIANCE, observed=0)
    assert (planner.points, planner.doubled, planner.doubled_points) == (4, 8, 3)
    assert "stated default" in planner.basis
    with pytest.raises(ValueError):
        planned_half_width(tasks=0, trials=4, variance=0.1)


def test_the_planner_half_width_is_what_repeated_evaluations_show():
    # Brute force: every outcome of 2 tasks × 2 trials with p = 0.5 (16 equally likely);
    # the spread of their pass^1 is σ²/(n k) with σ² = p(1 − p).
    values = [sum(outcome) / 4 for outcome in itertools.product([0, 1], repeat=4)]
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / len(values)
    assert planned_half_width(tasks=2, trials=2, variance=0.25) == pytest.approx(
        1.959963984540054 * math.sqrt(variance)
    )


def test_task_ids_sort_naturally():
    ids = ["13", "2", "19", "a10", "a9", "b", "1", "user_2_x", "user_10_x"]
    assert sorted(ids, key=task_order) == [
        "1",
        "2",
        "13",
        "19",
        "a9",
        "a10",
        "b",
        "user_2_x",
        "user_10_x",
    ]
    assert sorted(["²", "1"], key=task_order) == ["1", "²"]


# --- The trials planner on the evaluation form ---------------------------------------------


def _preview(client, **fields) -> str:
    from tests.evaluations.test_pages import form

    response = client.get(
        "/evaluations/new/", {**form(**fields), "preview": "1"}, HTTP_HX_REQUEST="true"
    )
    return response.content.decode()


def test_the_planner_states_its_default_when_the_team_has_no_repeated_trials(alice_client):
    body = _preview(alice_client, num_trials="4")

    # 20 test tasks × 4 trials at the default variance 0.1: 1.96 √(0.1 / 80) ≈ 0.069.
    assert "<strong>±7 points</strong> with 20 tasks × 4 trials; ±5 with 8 trials" in body
    assert "a stated default trial-to-trial variance of 0.1" in body
    assert "differ by about 10 points to be told apart" in body


def test_the_planner_reads_the_teams_own_noise_on_the_domain(alice, alice_client):
    from tests.support.evaluations import stored_evaluation

    # Every task passes 2 of 4 trials: variance 2·2 / (4·3) = 1/3 each.
    stored_evaluation(alice, outcomes={t: [1.0, 0.0, 1.0, 0.0] for t in ("27", "2", "13")})

    body = _preview(alice_client, num_trials="4")

    # 1.96 √((1/3) / 80) ≈ 0.127; with 8 trials ≈ 0.089.
    assert "<strong>±13 points</strong> with 20 tasks × 4 trials; ±9 with 8 trials" in body
    assert "the team observed on this domain (0.333, over 3 task × evaluation pairs" in body
    assert "with repeated trials, from 1 evaluation)" in body
    assert "stated default" not in body


def test_trials_that_never_differed_are_no_evidence_of_precision(alice, alice_client):
    """Issue 33: after one evaluation whose every run failed, the planner said "±0
    points". A variance of 0 says nothing of precision: the default stands in, and the
    planner says what it needs instead."""
    from tests.support.evaluations import stored_evaluation

    stored_evaluation(alice, outcomes={t: [0.0, 0.0, 0.0, 0.0] for t in ("27", "2", "13")})

    body = _preview(alice_client, num_trials="4")

    assert "±0 points" not in body
    assert "<strong>±7 points</strong> with 20 tasks × 4 trials; ±5 with 8 trials" in body
    assert "in 3 task × evaluation pairs, from 1 evaluation, every task passed all" in body
    assert "Until an evaluation of this domain has a task passing some of its trials" in body
    assert "a stated default trial-to-trial variance of 0.1" in body


# --- On compare and on the leaderboard ------------------------------------------------------


def test_compare_says_whether_the_difference_is_real_for_each_k_both_have(alice, alice_client):
    from apps.evaluations import selectors
    from tests.support.evaluations import stored_evaluation

    tasks = [str(i) for i in range(10)]
    a = stored_evaluation(alice, outcomes={t: [1.0, 0.0] for t in tasks})
    b = stored_evaluation(alice, outcomes={t: [1.0, 1.0] if t < "5" else [1.0, 0.0] for t in tasks})

    significance = selectors.evaluation_compare_significance(a, b)

    # pass^1: A 0.5, B (5 × 1 + 5 × 0.5) / 10 = 0.75; pass^2: 0 and 0.5.
    assert [d.k for d in significance.differences] == [1, 2]
    assert [d.delta for d in significance.differences] == [pytest.approx(0.25), 0.5]
    expected = paired_difference(
        {t: [1.0, 0.0] for t in tasks},
        {t: [1.0, 1.0] if t < "5" else [1.0, 0.0] for t in tasks},
    )
    assert significance.differences[0] == expected
    page = alice_client.get(f"/evaluations/compare/?ids={a.pk},{b.pk}").content.decode()
    assert f'data-testid="difference-1"><strong>pass^1:</strong> {expected.sentence}' in page
    assert expected.sentence.startswith("B is ahead by 25 points, 95% CI +")
    assert 'data-testid="difference-2"' in page and "compare-differs" not in page


def test_adjacent_leaderboard_rows_say_whether_one_is_really_ahead(alice, alice_client):
    from apps.evaluations.leaderboard import leaderboard
    from tau2_env.engine import catalog
    from tests.support.evaluations import stored_evaluation

    split = list(catalog.get_domain("airline").splits["test"])
    stored_evaluation(alice, agent_model="org/top", outcomes={t: [1.0] for t in split})
    stored_evaluation(
        alice, agent_model="org/close", outcomes={t: [float(i != 0)] for i, t in enumerate(split)}
    )
    stored_evaluation(alice, agent_model="org/last", outcomes={t: [0.0] for t in split})

    top, close, last = leaderboard(domain="airline")[0].rows

    assert top.versus_next.delta == pytest.approx(0.05) and not top.versus_next.distinguishable
    assert top.versus_next_sentence == difference_sentence(
        top.versus_next, a="org/close", b="org/top"
    )
    assert close.versus_next.delta == pytest.approx(0.95) and close.versus_next.distinguishable
    assert last.versus_next is None
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert page.count('data-testid="versus-next"') == 2
    assert "org/top is ahead by 5 points, 95% CI 0 to +15: not distinguishable" in page

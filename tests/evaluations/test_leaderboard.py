"""The leaderboard and the comparison of two evaluations, as alice and charlie see them.

Evaluations are written as finished rows (``stored_evaluation``): what these pages read.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client, override_settings

from apps.evaluations.leaderboard import leaderboard
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import compute_metrics
from tests.support.evaluations import stored_evaluation

TEST_SPLIT = list(catalog.get_domain("airline").splits["test"])
TRAIN_SPLIT = list(catalog.get_domain("airline").splits["train"])
CUSTOMER = "org/customer"


def outcomes(task_ids, solved: int, *, hard: list[float], easy: list[float] | None = None):
    """The first ``solved`` tasks get ``easy`` (default: always solved), the rest ``hard``."""
    easy = easy or [1.0] * len(hard)
    return {t: (easy if i < solved else hard) for i, t in enumerate(task_ids)}


def rows_of(html: str) -> list[tuple[str, str]]:
    """(group's customer, agent) of each leaderboard row, in page order."""
    found = []
    for group in html.split('data-testid="leaderboard-group"')[1:]:
        customer = re.search(r'data-customer="([^"]*)"', group).group(1)
        found += [(customer, a) for a in re.findall(r'data-agent="([^"]*)"', group)]
    return found


@pytest.fixture
def board(alice, bob):
    """Three agents on airline/test with the same customer; three evaluations apart."""
    made = {
        "a": stored_evaluation(
            alice, agent_model="org/agent-a", outcomes=outcomes(TEST_SPLIT, 15, hard=[1, 0, 1, 0])
        ),
        "b": stored_evaluation(
            bob, agent_model="org/agent-b", outcomes=outcomes(TEST_SPLIT, 0, hard=[1, 0, 0, 0])
        ),
        "imported": stored_evaluation(
            bob,
            agent_model="openai/agent-c",
            status="imported",
            outcomes=outcomes(TEST_SPLIT, 0, hard=[1, 1, 0, 0]),
        ),
        "other customer": stored_evaluation(
            alice,
            agent_model="org/agent-a",
            user_model="org/another-customer",
            outcomes=outcomes(TEST_SPLIT, 20, hard=[1, 1, 1, 1]),
        ),
        "other task set": stored_evaluation(
            alice,
            agent_model="org/agent-d",
            task_set_hash="0123456789abcdef",
            outcomes=outcomes(TEST_SPLIT, 20, hard=[1, 1, 1, 1]),
        ),
        "other split": stored_evaluation(
            alice,
            agent_model="org/agent-e",
            split="train",
            outcomes=outcomes(TRAIN_SPLIT, 30, hard=[1, 1, 1, 1]),
        ),
        # Not on the board: a part of the split, and one still running.
        "part": stored_evaluation(
            alice, agent_model="org/agent-part", outcomes=outcomes(TEST_SPLIT[:5], 5, hard=[1])
        ),
        "running": stored_evaluation(
            alice,
            agent_model="org/agent-running",
            status="running",
            outcomes=outcomes(TEST_SPLIT, 20, hard=[1]),
        ),
    }
    assert made["a"].full_split and not made["part"].full_split
    return made


def test_rows_are_ranked_only_within_split_task_set_and_customer(alice_client, board):
    groups = leaderboard(domain="airline")

    first = groups[0]
    assert (first.split, first.user_model, first.reason) == ("test", CUSTOMER, "")
    assert [(r.rank, r.agent_model) for r in first.rows] == [
        (1, "org/agent-a"),  # pass^1 (15 + 5 × 0.5) / 20
        (2, "openai/agent-c"),  # 0.5
        (3, "org/agent-b"),  # 0.25
    ]
    assert [r.pass_1 for r in first.rows] == [0.875, 0.5, 0.25]
    apart = {
        (g.split, g.task_set_hash, g.user_model): [r.agent_model for r in g.rows]
        for g in groups[1:]
    }
    main_hash = first.task_set_hash
    assert apart == {
        ("test", main_hash, "org/another-customer"): ["org/agent-a"],
        ("test", "0123456789abcdef", CUSTOMER): ["org/agent-d"],
        ("train", main_hash, CUSTOMER): ["org/agent-e"],
    }
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert rows_of(page)[:3] == [
        (CUSTOMER, a) for a in ("org/agent-a", "openai/agent-c", "org/agent-b")
    ]
    assert "org/agent-part" not in page and "org/agent-running" not in page


def test_every_group_apart_says_why(alice_client, board):
    reasons = {g.rows[0].agent_model: g.reason for g in leaderboard(domain="airline")[1:]}

    assert (
        "another customer model (org/another-customer, not org/customer)" in reasons["org/agent-a"]
    )
    assert "another task set (0123456789abcdef" in reasons["org/agent-d"]
    assert "another split (train, not test)" in reasons["org/agent-e"]
    assert all(r.startswith("Not ranked with the first group:") for r in reasons.values())
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert page.count('data-testid="apart-reason"') == 3
    assert "another customer model (org/another-customer, not org/customer)" in page


def test_every_pass_hat_k_has_a_95_percent_interval_around_it(alice_client, board):
    first = leaderboard(domain="airline")[0]

    for row in first.rows:
        assert [s.k for s in row.scores] == [1, 2, 3, 4]
        for score in row.scores:
            assert score.low <= score.value <= score.high
    a = first.rows[0]
    assert a.scores[0].low < a.scores[0].value < a.scores[0].high  # tasks disagree: a spread
    # pass^4 of a: 15 tasks always solved, 5 solved half the time → 15/20.
    assert a.scores[3].value == 0.75
    b = first.rows[2]
    assert b.scores[1].value == 0.0 and (b.scores[1].low, b.scores[1].high) == (0.0, 0.0)
    page = alice_client.get("/leaderboard/?domain=airline").content.decode()
    for k in (1, 2, 3, 4):
        assert page.count(f'data-testid="ci-{k}"') == 6  # every row on the page


def test_a_row_pools_its_agents_evaluations_and_shows_runs_cost_and_date(alice, board):
    again = stored_evaluation(
        alice,
        agent_model="org/agent-b",
        num_trials=2,
        outcomes=outcomes(TEST_SPLIT, 20, hard=[1, 1]),
        cost_usd=None,
        finished_ago=timedelta(days=-1),  # the newer one
    )
    first = leaderboard(domain="airline")[0]

    b = next(r for r in first.rows if r.agent_model == "org/agent-b")
    assert [e.pk for e in b.evaluations] == sorted([board["b"].pk, again.pk])
    assert b.runs == 20 * 4 + 20 * 2 and b.tasks == 20
    rewards = {t: [1.0, 0.0, 0.0, 0.0, 1.0, 1.0] for t in TEST_SPLIT}
    assert b.pass_1 == pytest.approx(compute_metrics(rewards).pass_hat_ks[1])
    # Per run, every priced call (here the agent's alone: no customer or judge calls).
    assert b.cost_per_run == Decimal("0.001") == b.agent_cost_per_run and b.unpriced == 40
    assert b.date == again.finished_at


def test_pass_hat_k_beyond_the_fewest_trials_is_left_empty(alice):
    stored_evaluation(alice, agent_model="org/two", outcomes=outcomes(TEST_SPLIT, 10, hard=[0, 1]))

    (row,) = leaderboard(domain="airline")[0].rows
    assert [s.value for s in row.scores] == [0.75, 0.5, None, None]
    assert row.scores[2].low is None


def test_charlie_is_sent_to_sign_in_unless_runs_are_public(board):
    charlie = Client()
    response = charlie.get("/leaderboard/?domain=airline")
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    with override_settings(TAU2_PUBLIC_RUNS=True):
        assert charlie.get("/leaderboard/?domain=airline").status_code == 200


def test_an_empty_or_unknown_domain(alice_client, board):
    page = alice_client.get("/leaderboard/?domain=retail").content.decode()
    assert 'data-testid="leaderboard-empty"' in page
    assert alice_client.get("/leaderboard/?domain=nowhere").status_code == 404


# --- comparing two evaluations -------------------------------------------------------


@pytest.fixture
def pair(alice, bob):
    tasks = TEST_SPLIT[:4]
    a = stored_evaluation(
        alice,
        agent_model="org/agent-a",
        outcomes={tasks[0]: [1, 1], tasks[1]: [0, 0], tasks[2]: [1, 0], tasks[3]: [1, 1]},
    )
    b = stored_evaluation(
        bob,
        agent_model="org/agent-b",
        outcomes={tasks[0]: [0, 0], tasks[1]: [1, 1], tasks[2]: [1, 1], tasks[3]: [1, 1]},
    )
    return tasks, a, b


def test_compare_shows_pass_rates_side_by_side_and_the_tasks_that_flip(alice_client, pair):
    tasks, a, b = pair

    response = alice_client.get(f"/evaluations/compare/?ids={a.pk},{b.pk}")

    assert response.status_code == 200
    page = response.content.decode()
    assert page.count('data-testid="compare-evaluation"') == 2
    assert 'data-testid="flips"><strong>2</strong>' in page
    flips = dict(re.findall(r'data-task-id="([^"]+)" data-flip="([ab]?)"', page))
    assert flips == {tasks[0]: "a", tasks[1]: "b", tasks[2]: "", tasks[3]: ""}
    assert "2/2" in page and "0/2" in page and "1/2" in page


def test_each_task_links_to_the_runs_compare_page_with_a_run_of_each(alice_client, pair):
    tasks, a, b = pair
    page = alice_client.get(f"/evaluations/compare/?ids={a.pk},{b.pk}").content.decode()

    links = re.findall(r'href="/runs/compare/\?ids=(\d+),(\d+)"', page)
    assert len(links) == 4
    run_a, run_b = (int(x) for x in links[0])
    assert a.runs.filter(pk=run_a).exists() and b.runs.filter(pk=run_b).exists()
    assert alice_client.get(f"/runs/compare/?ids={run_a},{run_b}").status_code == 200
    # Where the two differ, the pair shows the difference: a pass beside a fail.
    mixed = next(link for link in links if a.runs.get(pk=link[0]).task.task_id == tasks[2])
    assert (a.runs.get(pk=mixed[0]).reward, b.runs.get(pk=mixed[1]).reward) == (0.0, 1.0)


def test_compare_sorts_by_any_column(alice_client, pair):
    tasks, a, b = pair

    def order(query: str) -> list[str]:
        page = alice_client.get(f"/evaluations/compare/?ids={a.pk},{b.pk}&{query}").content
        return re.findall(r'data-testid="compare-task" data-task-id="([^"]+)"', page.decode())

    assert order("sort=delta&dir=desc") == [tasks[1], tasks[2], tasks[3], tasks[0]]
    assert order("sort=a") == [tasks[1], tasks[2], tasks[0], tasks[3]]
    assert order("sort=flip&dir=desc")[:2] == [tasks[1], tasks[0]]
    assert order("sort=task&dir=desc") == sorted(tasks, key=int, reverse=True)


def test_compare_needs_two_evaluations_of_one_domain(alice, alice_client, pair):
    tasks, a, b = pair
    retail = stored_evaluation(alice, domain="retail", split="test", outcomes={"5": [1]})
    assert alice_client.get(f"/evaluations/compare/?ids={a.pk}").status_code == 400
    assert alice_client.get("/evaluations/compare/?ids=x,y").status_code == 400
    assert alice_client.get(f"/evaluations/compare/?ids={a.pk},{retail.pk}").status_code == 400
    assert alice_client.get(f"/evaluations/compare/?ids={a.pk},999999").status_code == 404
    assert Client().get(f"/evaluations/compare/?ids={a.pk},{b.pk}").status_code == 403

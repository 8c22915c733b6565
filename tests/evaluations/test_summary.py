"""An evaluation's summary as one typed, versioned contract: it reads back as it was
written, the shapes stored before it read right, and the page, the API and the socket
show the same numbers of one evaluation.

alice owns the evaluation; bob, on her team, reads it on the page, the history, the API
and the socket.
"""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal

import pytest
from channels.db import database_sync_to_async

from apps.evaluations import selectors
from apps.evaluations.estimates import dollars
from apps.evaluations.models import Evaluation
from apps.evaluations.summary import EvaluationSummary, SummaryUnreadable, TaskReward
from apps.runs.models import Run
from tau2site.asgi import application
from tests.support.evaluations import stored_evaluation
from tests.support.websockets import WebsocketCommunicator, session_headers

TIMEOUT = 10

# The keys of a summary as the first evaluations stored it (commits 4acac3a, 62e0dfc):
# before the customer's calls were counted.
FIRST_SHAPE = [
    "planned",
    "completed",
    "failed",
    "stopped",
    "running",
    "queued",
    "final",
    "retryable",
    "eta_seconds",
    "avg_reward",
    "pass_hat_ks",
    "max_k",
    "tasks_scored",
    "successes",
    "reward_by_basis",
    "termination_reasons",
    "mean_messages",
    "mean_tool_calls",
    "mean_duration_s",
    "cost_usd",
    "mean_cost_usd",
    "prompt_tokens",
    "completion_tokens",
    "reward_by_task",
    "computed_at",
]


@pytest.fixture
def evaluation(alice) -> Evaluation:
    """airline 27 × 3 (1, 0, 1) and 2 × 3 (0, failed, 1). Trial 0's customer calls are
    priced, trial 1's are not (as runs stored before their customer was priced); one
    run ended on max_steps with two reward components. Its summary is stored."""
    evaluation = stored_evaluation(
        alice, outcomes={"27": [1.0, 0.0, 1.0], "2": [0.0, "failed", 1.0]}, split=""
    )
    runs = Run.objects.filter(evaluation=evaluation)
    runs.filter(trial=0).update(
        user_prompt_tokens=50, user_completion_tokens=5, user_cost_usd=Decimal("0.000300")
    )
    runs.filter(trial=1).update(user_prompt_tokens=40, user_completion_tokens=4)
    runs.filter(trial=2, task__task_id="2").update(
        termination_reason="max_steps",
        reward_info={"reward": 1.0, "reward_breakdown": {"DB": 1.0, "COMMUNICATE": 0.5}},
    )
    return store(evaluation, selectors.evaluation_metrics(evaluation))


def store(evaluation: Evaluation, summary: dict) -> Evaluation:
    Evaluation.objects.filter(pk=evaluation.pk).update(summary=summary)
    evaluation.refresh_from_db()
    return evaluation


def same_but_when(a: EvaluationSummary, b: EvaluationSummary) -> bool:
    """Equal but for when each was computed."""
    return dataclasses.replace(a, computed_at=b.computed_at) == b


# --- Reading back -------------------------------------------------------------------------


def test_a_summary_reads_back_from_its_json_as_it_was(evaluation):
    summary = selectors.evaluation_summary(evaluation)

    assert EvaluationSummary.from_json(summary.to_json()) == summary
    # Through the database's JSON column too (PostgreSQL's jsonb keeps its own numbers).
    store(evaluation, summary.to_json())
    assert selectors.evaluation_summary_stored(evaluation) == summary
    assert summary.pass_hat_ks == {1: pytest.approx(7 / 12), 2: pytest.approx(1 / 6)}
    # Over every scored run whose task's basis has the component: the runs without a
    # breakdown count their reward on their basis (DB), not left out (issue 21).
    assert summary.reward_by_basis == {"COMMUNICATE": 0.5, "DB": pytest.approx(0.6)}
    assert (summary.basis_runs, summary.basis_without_breakdown) == (5, 4)
    # The failed run (transient: not the model's) is left out and counted as such.
    assert summary.left_out == {"transient": 1} and summary.scored_runs == 5
    assert summary.termination_reasons == {"user_stop": 4, "failed": 1, "max_steps": 1}
    assert summary.reward_by_task == (
        TaskReward(task_id="27", reward=pytest.approx(2 / 3), trials=3),
        TaskReward(task_id="2", reward=0.5, trials=2),
    )
    assert (summary.cost_usd, summary.user_cost_usd, summary.total_cost_usd) == (
        Decimal("0.006000"),
        Decimal("0.000600"),
        Decimal("0.006600"),
    )
    # Trial 1's runs have customer calls without a price: no whole cost of theirs is known.
    assert summary.unpriced_runs == 2 and summary.mean_total_cost_usd == Decimal("0.00115")
    assert summary.tokens == 720 + 198


def test_its_json_is_what_the_summary_always_stored_with_a_version(evaluation):
    data = selectors.evaluation_metrics(evaluation)

    # The keys and their order of the summary stored since the customer was counted.
    assert list(data) == [
        "version",
        *FIRST_SHAPE[: FIRST_SHAPE.index("prompt_tokens")],
        "user_cost_usd",
        "total_cost_usd",
        "unpriced_runs",
        "mean_total_cost_usd",
        "prompt_tokens",
        "completion_tokens",
        "user_prompt_tokens",
        "user_completion_tokens",
        "reward_by_task",
        "computed_at",
        # Version 3 (issue 21): what the metrics are over and without simulator errors.
        "scored_runs",
        "failures_counted",
        "left_out",
        "basis_runs",
        "basis_without_breakdown",
        "sim_error_runs",
        "clean_pass_hat_ks",
        "clean_runs",
        "clean_tasks",
        # Version 4: τ²'s NL-assertion judge's calls, counted in the totals.
        "judge_prompt_tokens",
        "judge_completion_tokens",
        "judge_cost_usd",
    ]
    assert data["version"] == EvaluationSummary.VERSION == 4
    assert data["pass_hat_ks"] == {"1": pytest.approx(7 / 12), "2": pytest.approx(1 / 6)}
    assert data["total_cost_usd"] == "0.006600" and data["mean_total_cost_usd"] == "0.001150"
    assert data["reward_by_task"][0] == {
        "task_id": "27",
        "reward": pytest.approx(2 / 3),
        "trials": 3,
    }


VERSION_4_KEYS = ("judge_prompt_tokens", "judge_completion_tokens", "judge_cost_usd")
VERSION_3_KEYS = (
    *VERSION_4_KEYS,
    "scored_runs",
    "failures_counted",
    "left_out",
    "basis_runs",
    "basis_without_breakdown",
    "sim_error_runs",
    "clean_pass_hat_ks",
    "clean_runs",
    "clean_tasks",
)


def test_a_summary_of_version_2_or_without_a_version_reads_as_it_was_written(
    evaluation, django_assert_num_queries
):
    summary = selectors.evaluation_summary(evaluation)
    version_2 = {k: v for k, v in summary.to_json().items() if k not in VERSION_3_KEYS}
    unversioned = {k: v for k, v in version_2.items() if k != "version"}
    as_written = dataclasses.replace(summary, **dict.fromkeys(VERSION_3_KEYS))

    with django_assert_num_queries(0):  # read, not computed again
        assert EvaluationSummary.from_json({**version_2, "version": 2}) == as_written
        assert EvaluationSummary.from_json(unversioned) == as_written
    assert not as_written.complete and summary.complete
    # The pages compute it again: version 2's pass^k left the model's own failures out
    # and could not say what it left out (issue 21).
    store(evaluation, unversioned)
    assert same_but_when(selectors.evaluation_summary_stored(evaluation), summary)


def test_a_summary_stored_before_the_customer_was_counted_is_computed_again_from_the_runs(
    evaluation, bob_client
):
    first = {k: v for k, v in selectors.evaluation_metrics(evaluation).items() if k in FIRST_SHAPE}
    assert list(first) == FIRST_SHAPE
    store(evaluation, first)

    with pytest.raises(SummaryUnreadable):
        EvaluationSummary.from_json(evaluation.summary)
    summary = selectors.evaluation_summary_stored(evaluation)
    assert same_but_when(summary, selectors.evaluation_summary(evaluation))
    # What the first shape could not say: the customer's tokens and cost, and the runs
    # whose customer had no price.
    assert (summary.user_prompt_tokens, summary.user_completion_tokens) == (180, 18)
    assert summary.user_cost_usd == Decimal("0.000600") and summary.unpriced_runs == 2
    # The history and the API list show what the runs say.
    history = bob_client.get("/evaluations/").content.decode()
    row = history.split(f'data-evaluation-id="{evaluation.pk}"')[1].split("</tr>")[0]
    assert 'data-testid="pass-1">0.583<' in row and "$0.0066" in row
    listed = bob_client.get("/api/evaluations/").json()["results"]
    assert listed[0]["pass_hat_ks"] == summary.pass_hat_ks_json()


def test_a_summary_of_version_3_reads_as_written_and_is_computed_again_with_the_judge(
    evaluation, django_assert_num_queries
):
    # alice's retail-style runs were judged: τ²'s NL-assertion judge's calls cost too.
    Run.objects.filter(evaluation=evaluation, trial=0).update(
        judge_prompt_tokens=30, judge_completion_tokens=3, judge_cost_usd=Decimal("0.000100")
    )
    summary = selectors.evaluation_summary(evaluation)
    version_3 = {
        **{k: v for k, v in summary.to_json().items() if k not in VERSION_4_KEYS},
        "version": 3,
        "total_cost_usd": "0.006600",  # as version 3 totalled: without the judge
    }
    as_written = dataclasses.replace(
        summary, total_cost_usd=Decimal("0.006600"), **dict.fromkeys(VERSION_4_KEYS)
    )

    with django_assert_num_queries(0):
        assert EvaluationSummary.from_json(version_3) == as_written
    assert not as_written.complete and summary.complete
    # Every priced call, as each run's page totals it: the agent's, the customer's and
    # the judge's (trial 0's two runs were judged).
    assert summary.judge_cost_usd == Decimal("0.000200")
    assert summary.total_cost_usd == Decimal("0.006800")
    assert (summary.judge_prompt_tokens, summary.judge_completion_tokens) == (60, 6)
    store(evaluation, version_3)
    assert same_but_when(selectors.evaluation_summary_stored(evaluation), summary)


@pytest.mark.parametrize(
    "change",
    [
        {"version": 5},  # written by a newer release
        {"version": "2"},
        {"planned": None},
        {"pass_hat_ks": {"k": 0.5}},
        {"cost_usd": 0.005},
        {"cost_usd": "NaN"},
        {"computed_at": "yesterday"},
        {"reward_by_task": [{"task_id": 27, "reward": 1.0, "trials": 1}]},
        {"termination_reasons": ["user_stop"]},
    ],
)
def test_a_summary_it_cannot_read_is_computed_again_from_the_runs(evaluation, change):
    store(evaluation, {**evaluation.summary, **change})

    with pytest.raises(SummaryUnreadable):
        EvaluationSummary.from_json(evaluation.summary)
    summary = selectors.evaluation_summary_stored(evaluation)
    assert same_but_when(summary, selectors.evaluation_summary(evaluation))


def test_a_summary_missing_a_key_is_computed_again_from_the_runs(evaluation):
    store(evaluation, {k: v for k, v in evaluation.summary.items() if k != "retryable"})

    with pytest.raises(SummaryUnreadable, match="retryable"):
        EvaluationSummary.from_json(evaluation.summary)
    assert selectors.evaluation_summary_stored(evaluation).retryable == 1


def test_an_evaluation_not_summarised_yet_shows_no_numbers_in_the_lists(evaluation, bob_client):
    store(evaluation, {})

    assert selectors.evaluation_summary_stored(evaluation) is None
    history = bob_client.get("/evaluations/").content.decode()
    row = history.split(f'data-evaluation-id="{evaluation.pk}"')[1].split("</tr>")[0]
    assert 'data-testid="pass-1">—<' in row
    listed = bob_client.get("/api/evaluations/").json()["results"][0]
    assert (listed["pass_hat_ks"], listed["avg_reward"]) == ({}, None)


# --- One summary, every face --------------------------------------------------------------


def metric(html: str, testid: str) -> str:
    found = re.search(
        rf'data-testid="{testid}"><span class="metric-label">[^<]+</span>'
        r'<span class="metric-value">([^<]+)<',
        html,
    )
    assert found, f"no metric {testid}"
    return found.group(1)


async def test_the_page_the_api_and_the_socket_show_the_same_numbers(evaluation, bob_client):
    pk = evaluation.pk

    @database_sync_to_async
    def read():
        return (
            bob_client.get(f"/evaluations/{pk}/").content.decode(),
            bob_client.get("/evaluations/").content.decode(),
            bob_client.get(f"/api/evaluations/{pk}/").json(),
            bob_client.get("/api/evaluations/").json()["results"][0],
        )

    page, history, api, listed = await read()
    socket = WebsocketCommunicator(
        application,
        f"/ws/evaluations/{pk}/",
        headers=session_headers(bob_client),
    )
    connected, code = await socket.connect(timeout=TIMEOUT)
    assert connected, code
    state = await socket.receive_json_from(timeout=TIMEOUT)
    await socket.disconnect(timeout=TIMEOUT)

    summary = EvaluationSummary.from_json(api["metrics"])
    assert api["metrics"]["version"] == EvaluationSummary.VERSION
    # The socket's fragments are the page's, number for number.
    assert state["metrics_html"] in page and state["progress_html"] in page
    for html in (page, state["metrics_html"]):
        assert metric(html, "pass-1") == f"{summary.pass_hat(1):.3f}" == "0.583"
        assert metric(html, "pass-2") == f"{summary.pass_hat(2):.3f}" == "0.167"
        assert metric(html, "avg-reward") == f"{summary.avg_reward:.3f}" == "0.600"
    assert f"{summary.tokens:,} tokens" in state["progress_html"]
    assert f"{dollars(summary.total_cost_usd)} so far" in state["progress_html"]
    assert f"+ {summary.unpriced_runs} unpriced runs" in state["progress_html"]
    assert state["charts"]["pass_hat_k"] == [[k, v] for k, v in summary.pass_hat_ks.items()]
    assert (state["version"], state["retryable"]) == (summary.final, summary.retryable)
    # The lists read the stored summary: the same numbers, for a finished evaluation.
    assert (listed["pass_hat_ks"], listed["avg_reward"]) == (
        api["metrics"]["pass_hat_ks"],
        api["metrics"]["avg_reward"],
    )
    row = history.split(f'data-evaluation-id="{pk}"')[1].split("</tr>")[0]
    assert f'data-testid="pass-1">{summary.pass_hat(1):.3f}<' in row
    assert dollars(summary.total_cost_usd) in row

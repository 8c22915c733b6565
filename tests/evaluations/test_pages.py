"""Starting an evaluation and its live page, as each person sees them.

alice starts evaluations; bob is on her team (he may watch, not pause or stop hers);
charlie is anonymous; reviewer is staff. Evaluations are started through the real form
and services, with every worker slot taken (``TAU2_EVAL_MAX_IN_FLIGHT=0``): their runs
stay queued, nothing reaches Celery, and each test says what the page shows.
"""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.evaluations import services
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.scripts import AGENT_MODEL

UNPRICED_MODEL = "Qwen/Qwen3-32B:cerebras"  # the scripted router lists no price for it


@pytest.fixture(autouse=True)
def workers_full(settings):
    """No free worker slot: an evaluation's runs are created and stay queued."""
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0


def form(**overrides) -> dict:
    data = {
        "domain": "airline",
        "split": "test",
        "task_ids": "",
        "q": "",
        "kind": "",
        "agent_model": AGENT_MODEL,
        "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
        "num_trials": "2",
        "seed": "300",
        "max_steps": "200",
        "max_errors": "10",
        "concurrency": "8",
        "name": "",
    }
    data.update(overrides)
    return data


def start(client, **overrides) -> Evaluation:
    response = client.post("/evaluations/new/", form(**overrides))
    assert response.status_code == 302, response.content.decode()[:3000]
    evaluation = Evaluation.objects.order_by("-id").first()
    assert response["Location"] == f"/evaluations/{evaluation.pk}/"
    return evaluation


def errors(response) -> str:
    assert response.status_code == 400  # the form again, with why it was refused
    return " ".join(re.findall(r'class="error">([^<]*)<', response.content.decode()))


def evaluation_of(user, *, task_ids=("27", "2"), num_trials=2) -> Evaluation:
    return services.evaluation_create(
        user=user,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=services.TaskChoice(domain="airline", task_ids=list(task_ids)),
        num_trials=num_trials,
    )


def finish(run: Run, *, reward: float) -> None:
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.COMPLETED,
        reward=reward,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        termination_reason="user_stop",
        reward_info={"reward": reward, "reward_basis": ["DB"], "reward_breakdown": {"DB": reward}},
        n_messages=6,
        n_tool_calls=2,
        prompt_tokens=1000,
        completion_tokens=100,
    )


def metric(body: str, testid: str) -> tuple[str, str]:
    """A metric card's label and value."""
    found = re.search(
        rf'data-testid="{testid}"><span class="metric-label">([^<]+)</span>'
        r'<span class="metric-value">([^<]+)<',
        body,
    )
    assert found, f"no metric {testid}"
    return found.groups()


def page_data(response) -> dict:
    match = re.search(
        r'<script id="evaluation-data" type="application/json">(.*?)</script>',
        response.content.decode(),
        re.S,
    )
    assert match, "the page should carry its matrix and charts as JSON"
    return json.loads(match.group(1))


# --- Who may start, watch and steer ------------------------------------------------------


def test_charlie_anonymous_is_sent_to_sign_in_to_start_an_evaluation(committed_db):
    charlie = Client()
    response = charlie.get("/evaluations/new/?domain=airline&split=test")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/sign-in/")
    assert "reason=start" in response["Location"]
    response = charlie.post("/evaluations/new/", form())
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    assert not Evaluation.objects.exists()


def test_bob_may_watch_alices_evaluation_but_not_pause_or_stop_it(alice, bob_client):
    evaluation = evaluation_of(alice)
    page = bob_client.get(f"/evaluations/{evaluation.pk}/")
    assert page.status_code == 200
    body = page.content.decode()
    assert 'data-testid="matrix"' in body and 'data-testid="progress"' in body
    assert 'data-testid="controls"' not in body  # bob sees no buttons on alice's evaluation
    for action in ("pause", "stop", "resume", "retry"):
        assert bob_client.post(f"/evaluations/{evaluation.pk}/{action}/").status_code == 403
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.RUNNING
    assert bob_client.get(f"/evaluations/{evaluation.pk}/state/").status_code == 200


def test_charlie_is_sent_to_sign_in_from_the_page_and_its_buttons(alice, settings):
    evaluation = evaluation_of(alice)
    charlie = Client()
    response = charlie.get(f"/evaluations/{evaluation.pk}/")
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    assert charlie.get(f"/evaluations/{evaluation.pk}/state/").status_code == 403
    response = charlie.post(f"/evaluations/{evaluation.pk}/pause/")
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    settings.TAU2_PUBLIC_RUNS = True  # then charlie watches, read-only
    assert charlie.get(f"/evaluations/{evaluation.pk}/").status_code == 200
    assert charlie.post(f"/evaluations/{evaluation.pk}/stop/").status_code == 302
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.RUNNING


def test_alice_pauses_resumes_and_stops_her_evaluation(alice, alice_client):
    evaluation = evaluation_of(alice)
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert 'data-testid="pause"' in page and 'data-testid="stop"' in page
    steps = [("pause", "paused"), ("resume", "running"), ("stop", "stopped")]
    for action, status in steps:
        response = alice_client.post(f"/evaluations/{evaluation.pk}/{action}/")
        assert response.status_code == 302
        assert response["Location"] == f"/evaluations/{evaluation.pk}/"
        evaluation.refresh_from_db()
        assert evaluation.status == status
    assert set(evaluation.runs.values_list("status", flat=True)) == {Run.Status.STOPPED}
    assert alice_client.get(f"/evaluations/{evaluation.pk}/pause/").status_code == 405


def test_staff_may_stop_anyones_evaluation(alice):
    evaluation = evaluation_of(alice)
    reviewer = get_user_model().objects.create_user(username="reviewer", is_staff=True)
    staff = Client()
    staff.force_login(reviewer)
    assert staff.post(f"/evaluations/{evaluation.pk}/stop/").status_code == 302
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.STOPPED


def test_retry_queues_only_the_runs_that_failed_on_infrastructure(alice, alice_client):
    evaluation = evaluation_of(alice, task_ids=("27",), num_trials=2)
    lost, done = evaluation.runs.order_by("trial")
    finish(done, reward=1.0)
    Run.objects.filter(pk=lost.pk).update(
        status=Run.Status.FAILED, failure=Run.Failure.INFRASTRUCTURE, error="database lost"
    )
    Evaluation.objects.filter(pk=evaluation.pk).update(status=Evaluation.Status.COMPLETED)
    response = alice_client.post(f"/evaluations/{evaluation.pk}/retry/", follow=True)
    assert "1 failed run(s) queued again." in response.content.decode()
    lost.refresh_from_db()
    done.refresh_from_db()
    assert (lost.status, done.status) == (Run.Status.QUEUED, Run.Status.COMPLETED)


# --- The form ------------------------------------------------------------------------------


def test_the_form_refuses_an_unknown_task_id(alice_client):
    response = alice_client.post("/evaluations/new/", form(task_ids="27, no-such-task"))
    assert "No task no-such-task in airline." in errors(response)
    assert not Evaluation.objects.exists()


def test_the_form_refuses_more_than_eight_trials(alice_client):
    response = alice_client.post("/evaluations/new/", form(num_trials="9"))
    assert "less than or equal to 8" in errors(response)
    assert not Evaluation.objects.exists()


def test_the_form_refuses_a_split_the_domain_does_not_have(alice_client):
    response = alice_client.post("/evaluations/new/", form(domain="airline", split="full"))
    assert "airline has no split &#x27;full&#x27;." in errors(response)
    assert not Evaluation.objects.exists()


def test_the_form_refuses_a_search_that_matches_nothing(alice_client):
    response = alice_client.post("/evaluations/new/", form(q="zzzz-nothing-matches"))
    assert "No task of airline/test matches this search." in errors(response)


def test_the_split_list_offers_every_domains_splits_showing_the_chosen_domains(alice_client):
    body = alice_client.get("/evaluations/new/?domain=telecom").content.decode()
    assert '<option value="test" data-domain="telecom" selected>' in body
    assert '<option value="test" data-domain="airline" hidden disabled>' in body


# --- The preview -------------------------------------------------------------------------


def test_the_preview_counts_the_runs_and_estimates_a_priced_providers_cost(alice_client):
    response = alice_client.get(
        "/evaluations/new/", {**form(num_trials="4"), "preview": "1"}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert 'data-testid="preview-runs">80<' in body  # 20 tasks × 4 trials
    # The stated default, 50k–400k input and 1k–10k output tokens per run, at $0.27 / $1.10
    # per 1M: 80 × $0.0146 to 80 × $0.119.
    assert 'data-testid="preview-cost">Estimated cost: <strong>$1.17 – $9.52</strong>' in body
    assert "no completed runs of airline" in body


def test_the_preview_estimates_from_the_teams_own_runs_when_there_are_some(alice, alice_client):
    task = Task.objects.get(domain_id="airline", task_id="27")
    for tokens in (100_000, 200_000, 300_000):
        Run.objects.create(
            task=task,
            domain="airline",
            created_by=alice,
            agent_model=AGENT_MODEL,
            user_model="u/m",
            status=Run.Status.COMPLETED,
            finished_at=timezone.now(),
            prompt_tokens=tokens,
            completion_tokens=1_000,
        )
    body = alice_client.get(
        "/evaluations/new/", {**form(task_ids="27", num_trials="1"), "preview": "1"}
    ).content.decode()
    assert "from the team&#x27;s last 3 completed runs of airline" in body
    # One run: the 10th and 90th percentile of the three runs' cost.
    assert "Estimated cost: <strong>$0.028 – $0.082</strong>" in body


def test_the_preview_says_unpriced_for_a_provider_without_prices(alice_client):
    body = alice_client.get(
        "/evaluations/new/", {**form(agent_model=UNPRICED_MODEL), "preview": "1"}
    ).content.decode()
    assert 'data-testid="preview-runs">40<' in body
    assert "Estimated cost: <strong>unpriced</strong>" in body


def test_the_page_shows_the_preview_of_what_a_link_asks_for(alice_client):
    body = alice_client.get("/evaluations/new/?domain=airline&task_ids=27").content.decode()
    assert 'data-testid="preview-runs">4<' in body  # 1 task × the default 4 trials
    assert "Choose an agent model for a cost estimate." in body
    assert ">\n27</textarea>" in body


def test_the_preview_says_a_subset_is_not_ranked_on_the_team_leaderboard(alice_client):
    def preview(**data) -> str:
        return alice_client.get(
            "/evaluations/new/", {**form(**data), "preview": "1"}, HTTP_HX_REQUEST="true"
        ).content.decode()

    chosen = preview(task_ids="27 19 3")
    assert 'data-testid="preview-not-ranked"' in chosen
    assert "it ranks evaluations of a whole split only, and these are 3 chosen tasks" in chosen
    assert 'href="/leaderboard/"' in chosen
    searched = preview(q="flight")  # the explorer's search: part of the split
    assert "these are 19 of airline/test's 20 tasks" in searched
    assert 'data-testid="preview-not-ranked"' not in preview(split="test")  # the whole split


def test_the_page_of_a_subset_evaluation_says_the_leaderboard_does_not_rank_it(alice_client):
    subset = start(alice_client, task_ids="27 19 3", num_trials="1")
    whole = start(alice_client, split="test", num_trials="1")

    page = alice_client.get(f"/evaluations/{subset.pk}/").content.decode()
    assert 'data-testid="not-ranked"' in page
    assert "this one ran 3 chosen tasks. Its own numbers stand" in page
    assert (
        'data-testid="not-ranked"'
        not in alice_client.get(f"/evaluations/{whole.pk}/").content.decode()
    )


# --- Starting ----------------------------------------------------------------------------


def test_starting_on_a_split_evaluates_the_whole_split(alice, alice_client):
    evaluation = start(alice_client, split="test", num_trials="2")
    assert evaluation.created_by == alice and evaluation.status == Evaluation.Status.RUNNING
    assert (evaluation.domain, evaluation.split, evaluation.full_split) == ("airline", "test", True)
    assert len(evaluation.task_ids) == 20 and evaluation.runs.count() == 40
    assert evaluation.agent_model == AGENT_MODEL and evaluation.provenance["agent_prices"]


def test_starting_with_task_ids_evaluates_those_tasks_in_order(alice_client):
    evaluation = start(alice_client, task_ids="27, 2\n 27 13", num_trials="3", seed="42", name="x")
    assert evaluation.task_ids == ["27", "2", "13"] and evaluation.split == ""
    assert (evaluation.num_trials, evaluation.seed, evaluation.name) == (3, 42, "x")
    assert evaluation.runs.count() == 9 and not evaluation.full_split


def test_starting_from_an_explorer_query_evaluates_the_tasks_it_matches(alice_client):
    explorer = alice_client.get("/tasks/?domain=airline&split=test&q=cancel")
    cards = r'data-testid="task-card" data-task-id="([^"]+)"'
    matched = re.findall(cards, explorer.content.decode())
    assert 1 < len(matched) < 20
    evaluation = start(alice_client, split="test", q="cancel", num_trials="1")
    assert evaluation.task_ids == matched and evaluation.split == "test"
    assert evaluation.query == "domain=airline&split=test&q=cancel"
    assert not evaluation.full_split


def test_starting_without_a_usable_token_says_what_to_fix_on_the_form(alice, alice_client):
    alice.hf_credential.delete()
    response = alice_client.post("/evaluations/new/", form())
    said = errors(response)  # the form again (400), each router side saying why
    assert f"The agent model {AGENT_MODEL} runs on Hugging Face Inference Providers" in said
    assert "This account has no Hugging Face token" in said
    assert "Or pick an agent model on a connection." in said
    assert 'href="/accounts/sign-in/"' in response.content.decode()  # the picker's link
    assert not Evaluation.objects.exists()


# --- Entry points ------------------------------------------------------------------------


def test_the_explorer_offers_to_evaluate_the_tasks_it_shows(client, committed_db):
    body = client.get("/tasks/?domain=airline&split=test&q=cancel&kind=write").content.decode()
    link = re.search(r'href="([^"]+)" data-testid="evaluate-tasks">([^<]+)<', body)
    assert link, "the explorer should link to a new evaluation"
    count = re.search(r'data-testid="count"><strong>(\d+)</strong>', body).group(1)
    assert link.group(2) == f"Evaluate a model on these {count} tasks"
    query = "domain=airline&amp;split=test&amp;q=cancel&amp;kind=write"
    assert link.group(1) == f"/evaluations/new/?{query}"


def test_the_task_page_offers_to_evaluate_the_task(client, committed_db):
    body = client.get("/tasks/airline/27/").content.decode()
    assert 'href="/evaluations/new/?domain=airline&task_ids=27" data-testid="evaluate-task"' in body


def test_the_header_leads_to_evaluations_and_the_leaderboard(client, committed_db):
    body = client.get("/tasks/").content.decode()
    assert '<a href="/evaluations/" >Evaluations</a>' in body
    assert '<a href="/leaderboard/" >Leaderboard</a>' in body


# --- The live page -----------------------------------------------------------------------


def test_the_page_shows_progress_metrics_and_the_matrix_as_runs_finish(alice, bob_client):
    evaluation = evaluation_of(alice, task_ids=("27", "2"), num_trials=2)
    runs = {(r.task.task_id, r.trial): r for r in evaluation.runs.select_related("task")}
    finish(runs[("27", 0)], reward=1.0)
    finish(runs[("27", 1)], reward=1.0)
    finish(runs[("2", 0)], reward=0.0)
    Run.objects.filter(pk=runs[("2", 1)].pk).update(status=Run.Status.RUNNING)

    response = bob_client.get(f"/evaluations/{evaluation.pk}/")
    body = response.content.decode()
    assert "<strong>3</strong> of 4 runs finished" in body
    assert metric(body, "pass-1") == ("pass^1", "0.500")
    assert metric(body, "avg-reward") == ("average reward", "0.667")
    assert 'data-version="3"' in body
    data = page_data(response)
    assert data["matrix"]["tasks"] == ["2", "27"] and data["matrix"]["k"] == 2
    assert data["matrix"]["cells"] == [  # tasks in natural order (issue 21)
        [runs[("2", 0)].pk, "c", 0.0],
        [runs[("2", 1)].pk, "r", None],
        [runs[("27", 0)].pk, "c", 1.0],
        [runs[("27", 1)].pk, "c", 1.0],
    ]
    # τ²'s pass^1: (2/2 + 0/1) / 2 tasks, and only k = 1 while task 2 has one scored
    # trial; rewards by task, best first.
    assert data["charts"]["pass_hat_k"] == [[1, 0.5]]
    assert data["charts"]["reward_by_task"] == [[1, 1.0], [0, 0.0]]

    state = bob_client.get(f"/evaluations/{evaluation.pk}/state/").json()
    assert state["version"] == 3 and state["matrix"] == data["matrix"]
    assert state["status"] == "running" and 'data-testid="progress"' in state["progress_html"]


def test_the_page_reads_a_big_evaluation_in_a_fixed_number_of_queries(
    alice, alice_client, django_assert_max_num_queries
):
    small = evaluation_of(alice, task_ids=("27",), num_trials=1)
    telecom = list(Task.objects.filter(domain_id="telecom").values_list("task_id", flat=True)[:300])
    big = services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL)),
        tasks=services.TaskChoice(domain="telecom", task_ids=telecom),
        num_trials=4,
    )
    assert big.runs.count() == 1200
    # 12, 3 for the breakdowns on a first view (runs, tasks, the modes compared), and 1 for
    # the loops among the ended runs (the marks stored as they ended, apps.runs.endings), 1 for
    # the baselines of its domain (apps.evaluations.baselines: none to judge against), and
    # 1 for the visitor's schedules of it (the Schedules panel, apps.schedules).
    with django_assert_max_num_queries(18):
        assert alice_client.get(f"/evaluations/{small.pk}/").status_code == 200
    with django_assert_max_num_queries(18):
        response = alice_client.get(f"/evaluations/{big.pk}/")
    assert len(page_data(response)["matrix"]["cells"]) == 1200


def test_viewers_share_one_reading_of_an_evaluation_until_it_changes(
    alice, alice_client, bob_client
):
    evaluation = evaluation_of(alice, task_ids=("27",), num_trials=1)
    url = f"/evaluations/{evaluation.pk}/"
    with CaptureQueriesContext(connection) as first:
        assert alice_client.get(url).status_code == 200
    assert [q for q in first.captured_queries if 'INNER JOIN "tasks_task"' in q["sql"]]
    with CaptureQueriesContext(connection) as read:
        body = bob_client.get(url).content.decode()
    run_rows = [q for q in read.captured_queries if 'INNER JOIN "tasks_task"' in q["sql"]]
    assert run_rows == [] and "0 tokens" in body  # bob got the state alice's visit computed
    # A running run's tokens grow without any run finishing: the page shows it at once.
    evaluation.runs.update(status=Run.Status.RUNNING, prompt_tokens=1200, completion_tokens=34)
    assert "1,234 tokens" in bob_client.get(url).content.decode()

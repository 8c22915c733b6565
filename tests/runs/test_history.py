"""The team's history: list and filters, JSON download, compare, trace review — and who sees it.

alice and bob are signed in; charlie is anonymous; reviewer is staff.
"""

import json

from django.contrib.auth import get_user_model
from django.test import Client, override_settings

from apps.runs.models import ReviewLabel, Run, RunEvent
from apps.tasks.models import Task
from tests.runs.conftest import finished, gold_script, wait_for
from tests.support.people import signed_in
from tests.support.scripts import run_start


def _run(user, *, task_id="27", model="org/model-a", reward=1.0, lines=("Hi", "Hello")):
    task = Task.objects.get(domain_id="airline", task_id=task_id)
    run = Run.objects.create(
        task=task,
        domain="airline",
        created_by=user,
        agent_model=model,
        user_model="u/m",
        status=Run.Status.COMPLETED,
        reward=reward,
        termination_reason="user_stop",
        reward_info={
            "reward": reward,
            "reward_basis": ["DB"],
            "reward_breakdown": {"DB": reward},
            "db_check": {"db_match": reward == 1.0, "db_reward": reward},
        },
        n_messages=len(lines),
    )
    for seq, line in enumerate(lines):
        role = "assistant" if seq % 2 == 0 else "user"
        RunEvent.objects.create(
            run=run,
            seq=seq,
            kind="agent" if role == "assistant" else "customer",
            message={"role": role, "content": line},
        )
    return run


def test_the_history_lists_the_teams_runs_with_filters(alice, bob, alice_client):
    mine = _run(alice, model="org/model-a", reward=1.0)
    theirs = _run(bob, model="org/model-b", reward=0.0, task_id="1")
    body = alice_client.get("/runs/").content.decode()
    assert f'data-run-id="{mine.pk}"' in body and f'data-run-id="{theirs.pk}"' in body

    def ids(**params):
        html = alice_client.get("/runs/", params).content.decode()
        return {r.pk for r in (mine, theirs) if f'data-run-id="{r.pk}"' in html}

    assert ids(person="bob") == {theirs.pk}
    assert ids(model="model-a") == {mine.pk}
    assert ids(task="1") == {theirs.pk}
    assert ids(reward="1") == {mine.pk}
    assert ids(reward="0") == {theirs.pk}
    assert ids(status="failed") == set()
    assert ids(domain="airline") == {mine.pk, theirs.pk}


def test_charlie_is_sent_to_sign_in_unless_runs_are_public(alice, committed_db):
    run = _run(alice)
    charlie = Client()
    response = charlie.get("/runs/")
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]
    assert charlie.get(f"/runs/{run.pk}/").status_code == 403
    assert charlie.get(f"/runs/{run.pk}.json").status_code == 403
    with override_settings(TAU2_PUBLIC_RUNS=True):
        assert charlie.get("/runs/").status_code == 200
        page = charlie.get(f"/runs/{run.pk}/").content.decode()
        assert 'data-testid="stop"' not in page
        assert charlie.post(f"/runs/{run.pk}/stop/").status_code in (302, 403)
        assert Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED


def test_charlie_cannot_start_a_run(committed_db):
    response = Client().get("/runs/new/?domain=airline&task=27")
    assert response.status_code == 302 and "/accounts/sign-in/" in response["Location"]


def test_a_finished_run_downloads_as_json_and_scores_the_same_again(
    celery_worker, llm_server, alice, alice_client
):
    from tau2.data_model.simulation import Results
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    from tests.runs.conftest import ALICE_TOKEN

    gold_script(llm_server)
    run = wait_for(run_start(alice_client), finished)
    response = alice_client.get(f"/runs/{run.pk}.json")
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith("attachment;")
    data = json.loads(response.content)
    assert ALICE_TOKEN not in response.content.decode()
    assert data["reward"] == 1.0 and data["task_id"] == "27"
    assert len(data["messages"]) == run.events.count()

    native = json.loads(alice_client.get(f"/runs/{run.pk}.json?format=tau2").content)
    results = Results.model_validate(native)  # τ²-bench's own results format
    simulation = results.simulations[0]
    again = evaluate_simulation(
        simulation=simulation,
        task=results.tasks[0],
        evaluation_type=EvaluationType.ALL,
        solo_mode=False,
        domain="airline",
    )
    assert again.reward == data["reward"]
    assert (
        again.model_dump(mode="json")["reward_breakdown"] == data["reward_info"]["reward_breakdown"]
    )


def test_compare_puts_two_to_four_runs_side_by_side(alice, bob, alice_client):
    a = _run(alice, lines=("Hi", "Hello", "Bye"))
    b = _run(bob, model="org/model-b", reward=0.0, lines=("Hi", "Hola"))
    response = alice_client.get(f"/runs/compare/?ids={a.pk},{b.pk}")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count('data-testid="compare-column"') == 2
    rows = body.split('data-testid="compare-row"')[1:]
    assert len(rows) == 3
    assert 'data-differs="false"' in rows[0]  # "Hi" in both
    assert 'data-differs="true"' in rows[1]  # "Hello" vs "Hola"
    assert 'data-differs="true"' in rows[2]  # missing in b
    # Too few or too many: back to the list, still ticked (tests/runs/test_compare_selection.py).
    assert alice_client.get(f"/runs/compare/?ids={a.pk}").status_code == 302
    five = ",".join(str(_run(alice).pk) for _ in range(5))
    assert alice_client.get(f"/runs/compare/?ids={five}").status_code == 302
    assert alice_client.get(f"/runs/compare/?ids={a.pk},999999").status_code == 404


def test_staff_label_a_run_and_its_event_and_the_task_page_shows_the_flags(alice, committed_db):
    run = _run(alice)
    reviewer = get_user_model().objects.create_user(
        username="reviewer", is_staff=True, is_superuser=True
    )
    admin = Client()
    admin.force_login(reviewer)
    page = admin.get(f"/admin/runs/run/{run.pk}/change/")
    assert page.status_code == 200
    assert "Hello" in page.content.decode()  # the trace is inline
    event = run.events.get(seq=1)
    response = admin.post(
        "/admin/runs/reviewlabel/add/",
        {
            "run": run.pk,
            "event": event.pk,
            "category": "user_sim_error",
            "severity": "critical",
            "note": "The customer invented a reservation.",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    label = ReviewLabel.objects.get(run=run)
    assert label.created_by == reviewer and label.event == event
    assert admin.get("/admin/runs/run/?labels__category=user_sim_error").status_code == 200

    # The notes are about the team's runs: a visitor who may not see runs does not get them.
    assert (
        "The customer invented a reservation."
        not in Client().get("/tasks/airline/27/").content.decode()
    )
    task_page = signed_in(alice).get("/tasks/airline/27/").content.decode()
    assert 'data-testid="review-flags"' in task_page
    assert "user-simulator error" in task_page
    assert "The customer invented a reservation." in task_page


def test_people_who_are_not_staff_do_not_get_the_admin(alice_client, committed_db):
    response = alice_client.get("/admin/runs/run/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]

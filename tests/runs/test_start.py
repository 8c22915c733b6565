"""Starting a run from anywhere: the run form (domain, split, a task picker that follows
the domain), "New run" on the runs and models pages, and "Run again" / "Retry" / "Run with
another model" on a finished run's page.

alice and bob are signed-in members; charlie is anonymous.
"""

import re
from decimal import Decimal
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.test import Client, override_settings

from apps.runs import services
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tau2_env.engine.evaluation import trial_seeds
from tests.support.scripts import AGENT_MODEL, finished, gold_script, wait_for
from tests.tasks.test_catalogue import MOCK_TASKS

CUSTOMER_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
UNPRICED_MODEL = "Qwen/Qwen3-32B"
TELECOM_FULL_ID = "[mms_issue]airplane_mode_on|bad_network_preference"


def form_data(**changes) -> dict:
    data = {
        "domain": "retail",
        "task_id": "100",  # retail has 114 tasks, airline 50: this one is retail's only
        "agent_model": AGENT_MODEL,
        "user_model": CUSTOMER_MODEL,
        "max_steps": 30,
        "seed": 7,
    }
    return {**data, **changes}


def finished_run(user, *, status=Run.Status.COMPLETED, seed=7, trial=0, agent=AGENT_MODEL) -> Run:
    """A run as a worker leaves it (no worker involved): trial ``trial`` of ``seed``."""
    run = services.model_run_build(
        user=user,
        task=Task.objects.get(domain_id="airline", task_id="27"),
        spec=RunSpec(
            agent=Side(agent), customer=Side(CUSTOMER_MODEL), max_steps=30, max_errors=5, seed=seed
        ),
        trial=trial,
        trial_seed=trial_seeds(seed, trial + 1)[trial],
        prices=None,
    )
    run.status = status
    if status == Run.Status.FAILED:
        run.error, run.failure = "The provider answered 429 five times.", Run.Failure.TRANSIENT
    run.save()
    return run


def picker_items(html: str) -> list[tuple[str, str]]:
    """(domain, task id) of each task the picker lists."""
    return [
        (unescape(domain), unescape(task_id))
        for task_id, domain in re.findall(r'data-task-id="([^"]*)" data-domain="([^"]*)"', html)
    ]


def selected(html: str, name: str) -> str | None:
    select = re.search(rf'<select name="{name}".*?</select>', html, re.S)
    assert select, f"no <select name={name!r}>"
    option = re.search(r'<option value="([^"]*)"[^>]*\bselected\b', select.group(0))
    return unescape(option.group(1)) if option else None


def input_value(html: str, name: str) -> str | None:
    field = re.search(rf'<input[^>]*name="{name}"[^>]*>', html)
    assert field, f"no <input name={name!r}>"
    value = re.search(r'value="([^"]*)"', field.group(0))
    return unescape(value.group(1)) if value else None


def test_alice_starts_a_retail_task_choosing_the_domain(alice_client):
    page = alice_client.get("/runs/new/").content.decode()
    assert '<input type="hidden" name="domain"' not in page
    assert re.findall(r'<option value="(\w[\w-]*)"', page[page.index('name="domain"') :])[:4] == [
        "mock",
        "airline",
        "retail",
        "telecom",
    ]
    assert 'data-testid="split"' in page

    response = alice_client.post("/runs/new/", form_data())

    assert response.status_code == 302, response.content.decode()[:3000]
    run = Run.objects.get()
    assert (run.task.domain_id, run.task.task_id, run.domain) == ("retail", "100", "retail")
    assert (run.agent_model, run.user_model, run.max_steps) == (AGENT_MODEL, CUSTOMER_MODEL, 30)
    assert run.seed == trial_seeds(7, 1)[0] and run.provenance["args"]["trial"] == 0


def test_the_picker_lists_the_chosen_domains_tasks_only(alice_client):
    retail = alice_client.get("/runs/new/tasks/", {"domain": "retail", "split": "test"})
    items = picker_items(retail.content.decode())
    assert len(items) == 40 and {d for d, _ in items} == {"retail"}
    expected = Task.objects.filter(domain_id="retail", splits__name="test").order_by("position")
    assert [t for _, t in items] == list(expected.values_list("task_id", flat=True))
    # The split list follows the domain (htmx swaps it out of band).
    assert 'id="split-label" hx-swap-oob="true"' in retail.content.decode()

    airline = alice_client.get("/runs/new/tasks/", {"domain": "airline", "split": "test"})
    assert {d for d, _ in picker_items(airline.content.decode())} == {"airline"}
    assert len(picker_items(airline.content.decode())) == 20

    # A split the domain lacks (mock has only "base") falls back to one it has.
    mock = alice_client.get("/runs/new/tasks/", {"domain": "mock", "split": "test"})
    assert re.search(r'<option value="base"\s+selected', mock.content.decode())
    assert len(picker_items(mock.content.decode())) == MOCK_TASKS  # 9 on τ² 0.2, 10 on 1.x


def test_the_picker_searches_and_puts_the_typed_id_first(alice_client):
    words = alice_client.get(
        "/runs/new/tasks/", {"domain": "airline", "split": "base", "task_id": "certificate"}
    ).content.decode()
    found = picker_items(words)
    assert found and len(found) < 50
    titles = Task.objects.filter(domain_id="airline", task_id__in=[t for _, t in found])
    assert all("certificate" in t.search_text for t in titles)

    # A whole telecom id, of a task outside the listed split: it is listed, first, chosen.
    task = (
        Task.objects.filter(domain_id="telecom", task_id__startswith=TELECOM_FULL_ID)
        .exclude(splits__name="test")
        .first()
    )
    typed = alice_client.get(
        "/runs/new/tasks/", {"domain": "telecom", "split": "test", "task_id": task.task_id}
    ).content.decode()
    assert picker_items(typed)[0] == ("telecom", task.task_id)
    assert "picker-task chosen" in typed and f'title="{task.task_id} — ' in unescape(typed)
    assert "Picked from telecom; clear the field to list every task of telecom/test" in typed

    # A telecom split of 2,285 tasks lists the first 50 and says how to narrow them.
    full = alice_client.get("/runs/new/tasks/", {"domain": "telecom", "split": "full"})
    assert len(picker_items(full.content.decode())) == 50
    assert "2,285 tasks in telecom/full · the first 50 shown: type to narrow" in unescape(
        full.content.decode()
    )


def test_hostile_picker_queries_are_answered_without_error(alice_client, committed_db):
    for params in (
        {"domain": "a.b", "task_id": "x"},
        {"domain": "airline\x00", "split": "\x00", "task_id": "27\x00"},
        {"domain": "airline", "split": "test", "task_id": "%" * 300},
    ):
        response = Client().get("/runs/new/tasks/", params)
        assert response.status_code in (200, 400), params  # 400: a NUL byte, refused early
    page = alice_client.get("/runs/new/", {"domain": "nowhere", "task": "%", "seed": "x"})
    assert page.status_code == 200


def test_a_wrong_task_gives_a_clear_error_and_keeps_the_other_inputs(alice_client):
    response = alice_client.post(
        "/runs/new/", form_data(domain="airline", max_steps=12, seed=99, user_model="org/cust")
    )

    assert response.status_code == 400
    page = unescape(response.content.decode())
    assert "No task '100' in airline: pick one from the list, or choose the domain" in page
    assert not Run.objects.exists()
    assert selected(page, "domain") == "airline"
    assert selected(page, "agent_model") == AGENT_MODEL
    assert input_value(page, "task_id") == "100"
    assert input_value(page, "max_steps") == "12" and input_value(page, "seed") == "99"
    assert selected(page, "user_model") == "org/cust"
    # The picker says the chosen domain has no such task (and lists none of retail's).
    assert picker_items(page) == []
    assert "No task of airline/test matches" in page


def test_the_querystring_preselects_domain_split_task_and_model(alice_client):
    page = alice_client.get(
        "/runs/new/", {"domain": "retail", "split": "train", "task": "5", "model": AGENT_MODEL}
    ).content.decode()
    assert selected(page, "domain") == "retail"
    assert selected(page, "split") == "train"
    assert selected(page, "agent_model") == AGENT_MODEL
    assert input_value(page, "task_id") == "5"
    # Without a split, the picker lists one that holds the preselected task.
    telecom = Task.objects.filter(domain_id="telecom", splits__name="full").exclude(
        splits__name__in=["test", "base"]
    )[0]
    page = alice_client.get(
        "/runs/new/", {"domain": "telecom", "task": telecom.task_id}
    ).content.decode()
    assert selected(page, "split") == "full"
    assert picker_items(page)[0] == ("telecom", telecom.task_id)


def test_new_run_is_on_the_runs_page_and_on_each_model_of_the_models_page(alice_client):
    runs = alice_client.get("/runs/").content.decode()
    assert re.search(r'href="/runs/new/" data-testid="new-run"', runs)

    models = alice_client.get("/models/").content.decode()
    links = re.findall(r'href="(/runs/new/\?model=[^"]+)" data-testid="new-run"', models)
    rows = re.findall(r'<tr data-model="([^"]+)"', models)
    assert rows and len(links) == len(rows)
    link = unescape(next(x for x in links if "DeepSeek-V4.1-Flash" in x))
    assert parse_qs(urlsplit(link).query) == {"model": [CUSTOMER_MODEL]}
    assert selected(alice_client.get(link).content.decode(), "agent_model") == CUSTOMER_MODEL


def test_bob_runs_alices_finished_run_again_with_the_same_settings_and_seed(alice, bob_client):
    old = finished_run(alice, seed=7)
    before = Run.objects.values().get(pk=old.pk)
    page = bob_client.get(f"/runs/{old.pk}/").content.decode()
    assert 'data-testid="run-again"' in page and 'data-testid="retry"' not in page

    response = bob_client.post(f"/runs/{old.pk}/rerun/")

    new = Run.objects.exclude(pk=old.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{new.pk}/"
    assert new.created_by.username == "bob" and new.status == Run.Status.QUEUED
    assert (new.task_id, new.agent_model, new.user_model, new.max_steps) == (
        old.task_id,
        old.agent_model,
        old.user_model,
        old.max_steps,
    )
    assert new.seed == old.seed == trial_seeds(7, 1)[0]
    assert new.provenance["args"] == old.provenance["args"]
    prices = [Decimal(p) for p in new.provenance["agent_prices"]]
    assert prices == [Decimal("0.27"), Decimal("1.1")]  # priced as the catalogue is now
    assert Run.objects.values().get(pk=old.pk) == before  # the old run is untouched


def test_running_an_evaluations_trial_again_keeps_that_trials_seed(alice, alice_client):
    old = finished_run(alice, seed=300, trial=3)
    alice_client.post(f"/runs/{old.pk}/rerun/")
    new = Run.objects.exclude(pk=old.pk).get()
    assert new.seed == old.seed == trial_seeds(300, 4)[3]
    assert new.provenance["args"] == old.provenance["args"]  # trial 3, max_errors 5
    assert new.evaluation is None and new.trial is None


def test_run_with_another_model_opens_the_prefilled_form(alice, alice_client):
    old = finished_run(alice, seed=11, trial=2)
    page = alice_client.get(f"/runs/{old.pk}/").content.decode()
    link = unescape(re.search(r'href="([^"]+)" data-testid="run-other-model"', page).group(1))

    form = alice_client.get(link).content.decode()

    assert selected(form, "domain") == "airline" and input_value(form, "task_id") == "27"
    # Another model: the one it ran is named, not preselected again.
    assert selected(form, "agent_model") == ""  # "Choose a model…"
    assert "instead_of" in link and AGENT_MODEL in unescape(
        re.search(r'data-testid="instead-of">(.*?)</p>', form, re.S).group(1)
    )
    assert selected(form, "user_model") == CUSTOMER_MODEL
    assert input_value(form, "max_steps") == "30" and input_value(form, "seed") == "11"
    assert input_value(form, "trial") == "2"
    fields = {
        "domain": "airline",
        "split": selected(form, "split"),
        "task_id": "27",
        "agent_model": UNPRICED_MODEL,  # the other model
        "user_model": CUSTOMER_MODEL,
        "max_steps": "30",
        "seed": "11",
        "trial": "2",
    }
    response = alice_client.post("/runs/new/", fields)
    assert response.status_code == 302, response.content.decode()[:3000]
    new = Run.objects.exclude(pk=old.pk).get()
    assert new.agent_model == UNPRICED_MODEL and new.seed == old.seed
    assert (new.user_model, new.max_steps) == (old.user_model, old.max_steps)


def test_retry_is_offered_on_failed_runs_only(alice, alice_client):
    failed = finished_run(alice, status=Run.Status.FAILED)
    completed = finished_run(alice, status=Run.Status.COMPLETED)
    stopped = finished_run(alice, status=Run.Status.STOPPED)

    def buttons(run):
        page = alice_client.get(f"/runs/{run.pk}/").content.decode()
        return {b for b in ("retry", "run-again") if f'data-testid="{b}"' in page}

    assert buttons(failed) == {"retry"}
    assert buttons(completed) == buttons(stopped) == {"run-again"}

    response = alice_client.post(f"/runs/{failed.pk}/rerun/")

    retry = Run.objects.get(pk=int(response["Location"].strip("/").split("/")[-1]))
    assert retry.pk not in (failed.pk, completed.pk, stopped.pk)
    assert retry.seed == failed.seed and retry.status == Run.Status.QUEUED
    failed.refresh_from_db()
    assert failed.status == Run.Status.FAILED and failed.error


def test_a_run_still_going_or_a_play_session_is_not_run_again(alice, alice_client):
    running = finished_run(alice, status=Run.Status.RUNNING)
    response = alice_client.post(f"/runs/{running.pk}/rerun/", follow=True)
    assert "Only a finished model run can be run again." in response.content.decode()
    assert Run.objects.count() == 1

    running.kind, running.status = Run.Kind.HUMAN, Run.Status.COMPLETED
    running.save()
    page = alice_client.get(f"/runs/{running.pk}/").content.decode()
    assert 'data-testid="run-again-actions"' not in page
    alice_client.post(f"/runs/{running.pk}/rerun/")
    assert Run.objects.count() == 1


def test_a_model_gone_from_the_catalogue_sends_to_the_form_to_pick_another(alice, alice_client):
    old = finished_run(alice, agent="gone/model")
    response = alice_client.post(f"/runs/{old.pk}/rerun/")
    assert response.status_code == 302 and response["Location"].startswith("/runs/new/?")
    assert parse_qs(urlsplit(response["Location"]).query)["model"] == ["gone/model"]
    page = unescape(alice_client.get(response["Location"]).content.decode())
    assert "gone/model is not in the catalogue of models with a live provider" in page
    assert input_value(page, "task_id") == "27" and input_value(page, "seed") == "7"
    assert Run.objects.count() == 1


def test_charlie_and_people_who_may_not_start_cannot_run_again(alice, bob, bob_client):
    old = finished_run(alice, status=Run.Status.FAILED)
    charlie = Client()
    assert charlie.post(f"/runs/{old.pk}/rerun/").status_code == 403
    with override_settings(TAU2_PUBLIC_RUNS=True):
        page = charlie.get(f"/runs/{old.pk}/").content.decode()
        assert 'data-testid="run-again-actions"' not in page
        assert charlie.post(f"/runs/{old.pk}/rerun/").status_code == 403
    assert bob_client.get(f"/runs/{old.pk}/rerun/").status_code == 405
    bob.is_active = False
    bob.save()
    assert bob_client.post(f"/runs/{old.pk}/rerun/").status_code == 403
    assert bob_client.get("/runs/new/").status_code == 302  # to the sign-in page
    assert bob_client.post("/runs/new/", form_data()).status_code == 302
    assert Run.objects.count() == 1


@pytest.mark.slow
def test_a_run_again_reaches_the_models_with_the_same_seed(
    celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server)
    first = alice_client.post("/runs/new/", form_data(domain="airline", task_id="27"))
    old = wait_for(Run.objects.get(pk=int(first["Location"].strip("/").split("/")[-1])), finished)
    assert old.status == Run.Status.COMPLETED, old.error
    seen = len(llm_server.chat_requests())

    again = alice_client.post(f"/runs/{old.pk}/rerun/")

    new = wait_for(Run.objects.get(pk=int(again["Location"].strip("/").split("/")[-1])), finished)
    assert new.status == Run.Status.COMPLETED and new.reward == old.reward == 1.0
    requests = llm_server.chat_requests()
    assert len(requests) > seen
    assert {r.body.get("seed") for r in requests[:seen]} == {old.seed}
    assert {r.body.get("seed") for r in requests[seen:]} == {old.seed}

"""Live races on the production path: a real Celery worker, Redis, PostgreSQL, the real
ASGI app, and the scripted LLM answering each agent model its own way."""

from __future__ import annotations

import json
import threading

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone
from websockets.sync.client import connect

from apps.races.models import Race
from apps.races.selectors import finish_order, race_runs
from apps.races.services import race_create
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.people import person, signed_in
from tests.support.races import CUSTOMER, EXTRA, FAST, WRONG, race_script, start_race
from tests.support.scripts import (
    GOLD_CERTIFICATE,
    GOLD_TASK,
    finished,
    is_agent_request,
    refresh_agent_models,
)
from tests.support.scripts import wait_for as wait_for_run

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server):
    return refresh_agent_models()


def _watch(asgi_server, client, run_id: int, seen: dict) -> None:
    """Follow one lane on its run's socket until its final status: each event's seq and
    when it arrived."""
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    got = seen.setdefault(run_id, {"events": [], "final_at": None})
    with connect(
        asgi_server.ws_url(f"/ws/runs/{run_id}/?after=-1"),
        additional_headers={"Cookie": cookie, "Origin": asgi_server.url},
        open_timeout=10,
    ) as ws:
        for _ in range(400):
            data = json.loads(ws.recv(timeout=60))
            if data["type"] == "event":
                got["events"].append((data["seq"], timezone.now()))
            elif data["final"]:
                got["final_at"] = timezone.now()
                return


def test_three_models_race_live_to_their_rewards_in_finish_order(
    asgi_server, celery_worker, llm_server, alice, alice_client, bob_client
):
    race_script(llm_server)
    response = start_race(alice_client, [FAST, EXTRA, WRONG])
    assert response.status_code == 302, response.content.decode()[:2000]
    race = Race.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    runs = race_runs(race)
    assert [r.agent_model for r in runs] == [FAST, EXTRA, WRONG]

    # A subscriber on each lane's socket, all at once, while the lanes run.
    seen: dict = {}
    watchers = [
        threading.Thread(target=_watch, args=(asgi_server, alice_client, r.pk, seen)) for r in runs
    ]
    for w in watchers:
        w.start()
    # Mid-race, the page's fragment already shows the lanes going.
    mid = alice_client.get(f"/races/{race.pk}/lanes/")
    assert mid.status_code == 200 and mid.content.decode().count('data-testid="race-lane"') == 3
    for w in watchers:
        w.join(timeout=120)
    runs = [wait_for_run(r, finished, timeout=60) for r in runs]

    assert [r.status for r in runs] == [Run.Status.COMPLETED] * 3, [r.error for r in runs]
    assert [r.reward for r in runs] == [1.0, 1.0, 0.0]
    # One customer model, one seed, one trial: every LLM request of every lane carries it.
    assert {r.user_model for r in runs} == {CUSTOMER}
    assert len({r.seed for r in runs}) == 1 and runs[0].seed is not None
    requests = llm_server.chat_requests()
    assert {r.body.get("model") for r in requests if is_agent_request(r)} == {FAST, EXTRA, WRONG}
    assert {r.body.get("seed") for r in requests} == {runs[0].seed}
    # The customer opened every lane the same way.
    openings = [r.events.order_by("seq").first().message.get("content") for r in runs]
    assert len(set(openings)) == 1, openings

    # Each subscriber saw every event of its lane, in order, and before the run ended.
    for run in runs:
        got = seen[run.pk]
        assert [seq for seq, _ in got["events"]] == list(range(run.events.count()))
        assert got["final_at"] is not None
        assert got["events"][0][1] < run.finished_at, "the first event came only at the end"

    # Finish order by when each run ended: the quick gold lane first, the slow wrong one last.
    order = finish_order(runs)
    assert [r.agent_model for r in order] == [FAST, EXTRA, WRONG]
    assert order[0].finished_at <= order[1].finished_at <= order[2].finished_at

    page = alice_client.get(f"/races/{race.pk}/").content.decode()
    assert page.count('data-testid="race-lane"') == 3
    for place, run in enumerate(order, 1):
        assert f'data-run-id="{run.pk}" data-status="completed" data-place="{place}"' in page
    assert 'data-reward="1.0"' in page and 'data-reward="0.0"' in page
    assert f"seed {race.seed}" in page
    # Costs by role: the pinned novita lane is priced, cerebras has no price.
    assert page.count("agent $") >= 1 and "unpriced" in page
    # Lanes aligned by expected action: the extra read is a row of its own with gaps in the
    # other lanes; the wrong amount is marked inside the expected send_certificate row.
    assert 'data-aligned="true"' in page
    if GOLD_CERTIFICATE:  # 0.2's task 27 expects the certificate: a row of its own
        assert page.count('data-testid="aligned-gap"') == 2
        assert 'data-arg="amount" data-differs="true"' in page
        assert "Expected action 2: <code>send_certificate</code>" in page

    # Each run's page links to its lane of the race.
    run_page = alice_client.get(f"/runs/{runs[1].pk}/").content.decode()
    link = f'href="/races/{race.pk}/" data-testid="race-of-run">lane 2 of race {race.pk}<'
    assert link in run_page
    # Kept: listed among the races, reopened by bob (who may see runs).
    listing = bob_client.get("/races/").content.decode()
    assert f'data-race-id="{race.pk}"' in listing


def test_a_race_needs_two_to_four_known_different_models(committed_db, alice, alice_client):
    for models, message in [
        ([FAST], "A race needs 2 to 4 agent models; 1 was picked."),
        (
            [FAST, EXTRA, WRONG, "Qwen/Qwen3-32B", "a/b"],
            "A race needs 2 to 4 agent models; 5 were picked.",
        ),
        ([FAST, FAST], "Pick each agent model once: lanes must differ."),
        ([FAST, "nobody/nothing-here"], "nobody/nothing-here"),
    ]:
        response = start_race(alice_client, models)
        assert response.status_code == 400
        errors = response.content.decode()
        assert 'data-testid="lanes-error"' in errors
        assert message in errors, (models, errors[:300])
    assert not Race.objects.exists() and not Run.objects.exists()
    task = Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1])
    with pytest.raises(ValidationError, match="5 were picked"):
        race_create(
            user=alice,
            task=task,
            spec=RunSpec(agent=Side()),
            lanes=[Side(m) for m in (FAST, EXTRA, WRONG, "a/b", "c/d")],
        )
    with pytest.raises(ValidationError, match="1 was picked"):
        race_create(
            user=alice, task=task, spec=RunSpec(agent=Side()), lanes=[Side(FAST), Side(" ")]
        )
    assert not Race.objects.exists() and not Run.objects.exists()


def test_who_starts_and_who_sees_a_race(committed_db, alice, alice_client, bob_client, monkeypatch):
    # Lanes queued for no worker: this test only reads the race.
    monkeypatch.setattr("apps.runs.queue.run_enqueue", lambda run_id, **_: None)
    staff = person("stella", "hf_oauth_stella_race")
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    task = Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1])
    race = race_create(
        user=alice, task=task, spec=RunSpec(agent=Side(), seed=5), lanes=[Side(FAST), Side(EXTRA)]
    )
    anonymous = Client()
    assert anonymous.get("/races/")["Location"].startswith("/accounts/sign-in/")
    assert anonymous.get("/races/new/")["Location"].startswith("/accounts/sign-in/")
    assert start_race(anonymous, [FAST, EXTRA])["Location"].startswith("/accounts/sign-in/")
    assert anonymous.get(f"/races/{race.pk}/").status_code == 403
    assert anonymous.get(f"/races/{race.pk}/lanes/").status_code == 403
    for client in (bob_client, signed_in(staff)):
        assert client.get("/races/new/").status_code == 200
        page = client.get(f"/races/{race.pk}/")
        assert page.status_code == 200
        assert page.content.decode().count('data-testid="race-lane"') == 2
        assert client.get(f"/races/{race.pk}/lanes/").status_code == 200
    assert bob_client.get("/races/999999/").status_code == 404
    # The task page offers a race of it; the form comes with the task filled in.
    task_page = bob_client.get("/tasks/airline/27/").content.decode()
    assert 'href="/races/new/?domain=airline&task=27" data-testid="race-models"' in task_page
    form = bob_client.get("/races/new/?domain=airline&task=27").content.decode()
    assert 'name="task_id" value="27"' in form
    assert form.count('data-testid="model-picker"') == 4 and form.count(" required>") >= 2
    assert form.count(">No model in this lane</option>") == 2  # lanes 3 and 4 may stay empty
    assert Race.objects.count() == 1

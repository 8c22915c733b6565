"""What a race's page says of its lanes while they go: no tool call so far is "not yet",
not "these runs make no tool call" — that is said once every lane has finished.

alice starts a race of two models; its lanes are queued for no worker (the test moves
them itself).
"""

from __future__ import annotations

import pytest
from django.utils import timezone

from apps.races.selectors import NO_CALLS_YET
from apps.races.services import race_create
from apps.runs.compare import NO_CALLS
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.races import EXTRA, FAST
from tests.support.scripts import GOLD_TASK, refresh_agent_models


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server):
    return refresh_agent_models()


@pytest.fixture
def race(alice, monkeypatch):
    monkeypatch.setattr("apps.runs.queue.run_enqueue", lambda run_id, **_: None)
    task = Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1])
    return race_create(
        user=alice, task=task, spec=RunSpec(agent=Side(), seed=5), lanes=[Side(FAST), Side(EXTRA)]
    )


def lanes_note(client, race) -> str:
    page = client.get(f"/races/{race.pk}/lanes/")
    assert page.status_code == 200
    return page.content.decode()


def test_a_race_still_going_says_no_lane_has_called_a_tool_yet(race, alice_client):
    html = lanes_note(alice_client, race)
    assert NO_CALLS_YET in html
    assert NO_CALLS not in html
    Run.objects.filter(race_lane__race=race).update(status=Run.Status.RUNNING)
    html = lanes_note(alice_client, race)
    assert NO_CALLS_YET in html and NO_CALLS not in html
    # One lane done, the other still going: still "yet".
    first = Run.objects.filter(race_lane__race=race).order_by("race_lane__position").first()
    Run.objects.filter(pk=first.pk).update(
        status=Run.Status.COMPLETED, reward=0.0, finished_at=timezone.now()
    )
    assert NO_CALLS_YET in lanes_note(alice_client, race)


def test_a_finished_race_without_tool_calls_says_so(race, alice_client):
    Run.objects.filter(race_lane__race=race).update(
        status=Run.Status.COMPLETED, reward=0.0, finished_at=timezone.now()
    )
    html = lanes_note(alice_client, race)
    assert NO_CALLS in html
    assert NO_CALLS_YET not in html

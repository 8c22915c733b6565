"""The banner on the pages where people wait for a worker — a run, a play session, an
evaluation, a race: "No worker has been alive since HH:MM — runs wait." when none is,
and there but hidden while one is (static/js/worker_banner.js shows it live)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.races.models import Race, RaceLane
from apps.runs.models import Run
from tests.support.evaluations import stored_evaluation
from tests.support.people import signed_in
from tests.support.scripts import queued_run
from tests.workers.conftest import beat_row

BANNER = re.compile(r'<div class="message error worker-banner"[^>]*>(?P<text>[^<]*)</div>')


@pytest.fixture
def pages(alice):
    """alice's run, play session, evaluation and race: the four live pages."""
    run = queued_run(alice)
    session = Run.objects.create(
        kind=Run.Kind.HUMAN,
        task=run.task,
        domain=run.domain,
        created_by=alice,
        agent_model="a person",
        user_model=run.user_model,
        status=Run.Status.RUNNING,
        play_phase=Run.PlayPhase.YOUR_TURN,
    )
    evaluation = stored_evaluation(alice, outcomes={"27": [1.0]}, status="running")
    race = Race.objects.create(created_by=alice, task=run.task, user_model=run.user_model, seed=3)
    RaceLane.objects.create(race=race, run=run, position=0)
    return {
        "run": f"/runs/{run.pk}/",
        "play": f"/play/{session.pk}/",
        "evaluation": f"/evaluations/{evaluation.pk}/",
        "race": f"/races/{race.pk}/",
    }


def banner(client: Client, url: str) -> tuple[str, bool] | None:
    """The banner's text and whether it is hidden, or None when the page has none."""
    response = client.get(url)
    assert response.status_code == 200, url
    found = BANNER.search(response.content.decode())
    if found is None:
        return None
    return found["text"], " hidden" in found[0]


@pytest.mark.parametrize("kind", ["run", "play", "evaluation", "race"])
def test_each_live_page_says_since_when_no_worker_is_alive(own_queue, settings, alice, pages, kind):
    gone = timedelta(seconds=settings.TAU2_WORKER_ALIVE_SECONDS + 60)
    last = beat_row(queue=own_queue, hostname="gone@host", beat_ago=gone)
    at = timezone.localtime(last.last_beat)

    shown = banner(signed_in(alice), pages[kind])

    assert shown == (f"No worker has been alive since {at:%H:%M} — runs wait.", False)


@pytest.mark.parametrize("kind", ["run", "play", "evaluation", "race"])
def test_each_live_page_keeps_the_banner_hidden_while_a_worker_beats(own_queue, alice, pages, kind):
    beat_row(queue=own_queue, hostname="up@host")

    assert banner(signed_in(alice), pages[kind]) == ("", True)


def test_bob_sees_it_on_alices_run_and_charlie_only_what_a_probe_sees(own_queue, alice, bob, pages):
    shown = "No worker is alive — runs wait."  # none ever beat

    assert banner(signed_in(bob), pages["run"]) == (shown, False)
    charlie = Client()
    assert charlie.get(pages["run"]).status_code == 403  # the team's runs need a sign-in
    assert charlie.get("/health/workers").json()["message"] == shown


def test_other_pages_have_no_banner(own_queue, alice, pages):
    client = signed_in(alice)
    for url in ("/runs/", "/tasks/", "/evaluations/", "/races/", "/play/"):
        assert banner(client, url) is None, url

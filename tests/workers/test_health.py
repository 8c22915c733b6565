"""``/health/workers`` for an orchestrator's probe: 200 while a worker is alive, 503 when
none is, and since when — while OpenEnv's ``/health``, which compose's web and openenv
checks ask, stays 200 whatever the workers do."""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from apps.workers.models import WorkerBeat
from tests.workers.conftest import beat_row


def health(client: Client) -> tuple[int, dict]:
    response = client.get("/health/workers")
    assert response["Content-Type"] == "application/json"
    assert "no-store" in response["Cache-Control"]
    return response.status_code, response.json()


def test_it_answers_200_and_since_when_while_a_worker_beats(own_queue):
    older = beat_row(queue=own_queue, hostname="a@host", started_ago=timedelta(minutes=30))
    beat_row(queue=own_queue, hostname="b@host", started_ago=timedelta(minutes=5))

    status, body = health(Client())  # charlie: anonymous, like a probe

    assert status == 200
    assert body == {
        "alive": True,
        "since": timezone.localtime(older.started_at).isoformat(),
        "workers": 2,
        "message": "",
    }


def test_it_answers_503_with_the_last_beat_once_every_worker_is_silent(own_queue, settings):
    window = timedelta(seconds=settings.TAU2_WORKER_ALIVE_SECONDS)
    last = beat_row(queue=own_queue, hostname="a@host", beat_ago=window + timedelta(seconds=5))
    beat_row(queue=own_queue, hostname="b@host", beat_ago=timedelta(hours=2))

    status, body = health(Client())

    assert status == 503
    since = timezone.localtime(last.last_beat)
    assert body == {
        "alive": False,
        "since": since.isoformat(),
        "workers": 0,
        "message": f"No worker has been alive since {since:%H:%M} — runs wait.",
    }


def test_a_worker_that_stopped_is_not_alive_though_its_beat_is_recent(own_queue):
    stopped = beat_row(queue=own_queue, hostname="a@host", stopped=True)

    status, body = health(Client())

    assert status == 503
    assert body["since"] == timezone.localtime(stopped.last_beat).isoformat()


def test_it_answers_503_when_no_worker_ever_beat(own_queue):
    status, body = health(Client())

    assert status == 503
    assert body == {
        "alive": False,
        "since": None,
        "workers": 0,
        "message": "No worker is alive — runs wait.",
    }


def test_workers_of_other_queues_do_not_count(own_queue):
    beat_row(queue=f"{own_queue}-other", hostname="elsewhere@host")
    try:
        status, body = health(Client())
    finally:
        WorkerBeat.objects.filter(hostname="elsewhere@host").delete()

    assert status == 503 and body["since"] is None


def test_openenvs_health_stays_200_when_no_worker_is_alive(own_queue, asgi_server):
    assert health(Client())[0] == 503
    with urllib.request.urlopen(f"{asgi_server.url}/health", timeout=10) as response:
        assert response.status == 200
    try:
        urllib.request.urlopen(f"{asgi_server.url}/health/workers", timeout=10)
    except urllib.error.HTTPError as error:
        assert error.code == 503
    else:
        raise AssertionError("/health/workers answered 2xx with no worker alive")


def test_its_503_is_an_answer_not_an_error_in_the_log(own_queue, caplog):
    with caplog.at_level(logging.INFO, logger="django.request"):
        assert Client().get("/health/workers").status_code == 503
        assert Client().get("/runs/999999999/").status_code == 403  # others still logged

    assert [r.getMessage() for r in caplog.records] == [
        "Forbidden (Permission denied): /runs/999999999/"
    ]

"""The live run page's WebSocket through the real ASGI app, channels_redis and a real worker."""

import json

import pytest
from websockets.sync.client import connect

from apps.runs.models import Run
from tests.runs.conftest import finished, gold_script, wait_for
from tests.support.scripts import run_start

pytestmark = pytest.mark.slow


def _socket(asgi_server, client, run, after=-1):
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    return connect(
        asgi_server.ws_url(f"/ws/runs/{run.pk}/?after={after}"),
        additional_headers={"Cookie": cookie, "Origin": asgi_server.url},
        open_timeout=10,
    )


def _read_until_final(ws, *, seen: list[int], limit: int = 200, stop_after: int | None = None):
    statuses = []
    for _ in range(limit):
        data = json.loads(ws.recv(timeout=30))
        if data["type"] == "event":
            seen.append(data["seq"])
            assert 'data-testid="event"' in data["html"]
            if stop_after is not None and len(seen) >= stop_after:
                return statuses
        else:
            statuses.append(data["status"])
            if data["final"]:
                return statuses
    pytest.fail("the run never reached a final status over the socket")


def test_events_stream_while_the_run_is_going(
    asgi_server, celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server, delay=0.4)
    run = run_start(alice_client)
    seen: list[int] = []
    running_when_first_event = None
    live_statuses = []
    with _socket(asgi_server, alice_client, run) as ws:
        while True:
            data = json.loads(ws.recv(timeout=30))
            if data["type"] == "event":
                if running_when_first_event is None:
                    running_when_first_event = Run.objects.get(pk=run.pk).status
                seen.append(data["seq"])
            elif data["final"]:
                assert 'data-testid="stop"' not in data["html"]
                assert 'data-testid="reward"' in data["html"]
                break
            else:
                live_statuses.append(data["html"])
    run = wait_for(run, finished)
    assert running_when_first_event in (Run.Status.RUNNING, Run.Status.QUEUED)
    # alice may stop her run from every live status line, not only the first page load.
    assert live_statuses and all('data-testid="stop"' in html for html in live_statuses)
    assert seen == list(range(run.events.count()))
    assert run.reward == 1.0


def test_a_reconnecting_browser_resumes_without_gap_or_duplicate(
    asgi_server, celery_worker, llm_server, alice, alice_client
):
    gold_script(llm_server, delay=0.4)
    run = run_start(alice_client)
    seen: list[int] = []
    with _socket(asgi_server, alice_client, run) as ws:
        _read_until_final(ws, seen=seen, stop_after=3)
    assert seen == [0, 1, 2]
    with _socket(asgi_server, alice_client, run, after=seen[-1]) as ws:
        statuses = _read_until_final(ws, seen=seen)
    run = wait_for(run, finished)
    assert seen == list(range(run.events.count()))
    assert statuses[-1] == "completed"


def test_the_socket_refuses_anonymous_visitors(
    asgi_server, celery_worker, llm_server, alice, alice_client
):
    from django.test import Client
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    gold_script(llm_server)
    run = run_start(alice_client)
    anonymous = Client()
    anonymous.get("/tasks/")  # no session cookie at all
    with (  # noqa: PT012
        pytest.raises((ConnectionClosed, InvalidStatus)),
        connect(
            asgi_server.ws_url(f"/ws/runs/{run.pk}/"),
            additional_headers={"Origin": asgi_server.url},
            open_timeout=10,
        ) as ws,
    ):
        ws.recv(timeout=10)
    wait_for(run, finished)

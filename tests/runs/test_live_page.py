"""The live run page is what a reload shows: the socket's messages are the page's own HTML,
a status never comes ahead of the events stored before it, a status brings what a lost
event message did not, and the page's body (``?part=body``) is the page's own.

Through the real ``tau2site.asgi.application`` with Channels' ``WebsocketCommunicator`` and
channels_redis, as tests/runs/test_consumers.py; alice owns the run, stella is staff.
"""

from __future__ import annotations

import re

from channels.db import database_sync_to_async

from apps.runs import consumers
from apps.runs.events import events_publish
from apps.runs.lifecycle import run_finish
from apps.runs.models import Run
from tau2_env.engine.evaluation import trial_seeds
from tests.runs.test_consumers import (
    TIMEOUT,
    announce_status,
    frames,
    kinds,
    run,  # noqa: F401 - alice's running run with events 0..2
    store,
    watching,
)
from tests.support.people import signed_in
from tests.support.review import staff_member, stored_run

_CSRF = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*(")')


def _page(client, shown: Run, query: str = "") -> str:
    response = client.get(f"/runs/{shown.pk}/{query}")
    assert response.status_code == 200
    return _CSRF.sub(r"\1\2", response.content.decode())


page = database_sync_to_async(_page)


async def test_a_status_message_brings_the_events_a_lost_event_message_did_not(
    run,  # noqa: F811
    alice_client,
):
    async with watching(run, client=alice_client, after="2") as socket:
        await frames(socket, 1)
        await store(run, 2)  # stored, and their run.event lost
        await announce_status(run)
        received = await frames(socket, 3)
        assert await socket.receive_nothing(timeout=0.5)
    assert kinds(received) == [3, 4, "status"]


def _worker_ends_the_run(run_id: int) -> None:
    """What a worker does in one breath: store its last two messages, then end the run (each
    announced by the real publishers)."""
    running = Run.objects.get(pk=run_id)
    events_publish(
        run=running,
        messages=[
            {"role": "assistant", "content": "Your certificate is on its way."},
            {"role": "user", "content": "Thanks. ###STOP###"},
        ],
    )
    run_finish(
        run=running,
        status=Run.Status.COMPLETED,
        termination_reason="user_stop",
        reward_info={"reward": 1.0, "reward_basis": ["DB"], "reward_breakdown": {"DB": 1.0}},
    )


async def test_a_final_status_never_comes_ahead_of_the_events_stored_before_the_run_ended(
    run,  # noqa: F811
    alice_client,
    monkeypatch,
):
    # The worker stores its last events and ends the run right after the consumer's first
    # read of events on connect. Had it then read the run's status, it would say "final"
    # without those events, and the page closes its socket on a final status.
    read_events = consumers.run_events
    calls = []

    def run_events(*, run_id, after):
        found = list(read_events(run_id=run_id, after=after))
        if not calls:
            _worker_ends_the_run(run_id)
        calls.append(after)
        return found

    monkeypatch.setattr(consumers, "run_events", run_events)
    received = []
    async with watching(run, client=alice_client, after="2") as socket:
        while not (received and received[-1]["type"] == "status" and received[-1]["final"]):
            received.append(await socket.receive_json_from(timeout=TIMEOUT))
    first_final = next(i for i, f in enumerate(received) if f["type"] == "status" and f["final"])
    sent_before = [f["seq"] for f in received[:first_final] if f["type"] == "event"]
    assert sent_before == [3, 4], kinds(received)


async def test_each_message_comes_over_the_socket_as_the_run_page_renders_it(
    run,  # noqa: F811
):
    stella = await database_sync_to_async(staff_member)("stella")
    client = await database_sync_to_async(signed_in)(stella)
    async with watching(run, client=client, after="-1&menu=1") as socket:
        received = await frames(socket, 4)
    shown = await page(client, run)
    assert kinds(received) == [0, 1, 2, "status"]
    for frame in received[:3]:
        assert 'data-testid="message-menu"' in frame["html"]
        assert 'data-testid="label-message"' in frame["html"]  # stella reviews
        assert frame["html"] in shown


async def test_the_play_page_gets_the_messages_without_the_run_pages_menu(
    run,  # noqa: F811
    alice_client,
):
    async with watching(run, client=alice_client, after="1") as socket:
        (event, _status) = await frames(socket, 2)
    assert 'data-testid="event"' in event["html"]
    assert 'data-testid="message-menu"' not in event["html"]


def test_the_body_a_live_page_fetches_is_the_pages_own(alice):
    stella = staff_member("stella")
    client = signed_in(stella)
    ended = stored_run(alice, reward=0.0, messages=4)
    body = _page(client, ended, "?part=body")
    assert body.startswith('<div id="run-page"') and "<html" not in body
    assert 'data-testid="label-message"' in body and 'data-testid="fork-here"' in body
    assert body.strip() in _page(client, ended)


def test_the_seed_says_the_seed_given_and_the_trial_seed_tau2_derived_from_it(alice):
    (derived,) = trial_seeds(300, 1)  # as tau2 run --seed 300 derives trial 0's
    ran = stored_run(alice)
    Run.objects.filter(pk=ran.pk).update(given_seed=300, seed_trial=0, seed=derived)
    html = _page(signed_in(alice), ran)
    assert f"seed 300 (trial 0 → {derived})" in html
    assert f"trial 0’s is {derived}, the seed τ²’s orchestrator got" in html


def test_a_seed_whose_given_seed_was_not_kept_is_shown_as_it_is(alice):
    ran = stored_run(alice)
    Run.objects.filter(pk=ran.pk).update(given_seed=None, seed=626729)
    html = _page(signed_in(alice), ran)
    assert ">seed 626729</span>" in html

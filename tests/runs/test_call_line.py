"""A run's LLM call shown while it happens (issue 33): the worker's ``run.call`` group
message reaches alice's live page as a passing ``call`` frame, never stored; the runner
tells each call's start and end (``tau2_env.llm.gateway.observe_calls``)."""

from __future__ import annotations

import json

import pytest
import redis
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from websockets.sync.client import connect

from apps.runs import current_call
from apps.runs.events import CallMessage, call_publish, group_name
from apps.runs.lifecycle import run_finish
from apps.runs.models import Run
from tau2_env.llm import gateway
from tests.runs.conftest import finished, gold_script, wait_for
from tests.runs.test_consumers import (  # noqa: F401 - run is a fixture
    communicator,
    frames,
    run,
    watching,
)
from tests.support.scripts import run_start


async def _tell_calls(run) -> None:  # noqa: F811
    for phase, seconds in (("waiting", 0.0), ("answered", 41.5)):
        await get_channel_layer().group_send(
            group_name(run.pk),
            CallMessage(
                type="run.call",
                run_id=run.pk,
                side="customer",
                phase=phase,
                seconds=seconds,
                timeout=120.0,
            ),
        )


async def test_alice_sees_the_customers_call_waiting_then_answered(run, alice_client):  # noqa: F811
    socket = communicator(run.pk, client=alice_client, after="-1&menu=1&calls=1")
    connected, _ = await socket.connect(timeout=10)
    assert connected
    try:
        await frames(socket, 4)  # the stored events, then the status
        await _tell_calls(run)
        received = await frames(socket, 2)
        assert await socket.receive_nothing(timeout=0.5)
    finally:
        await socket.disconnect(timeout=10)
    assert received == [
        {"type": "call", "side": "customer", "phase": "waiting", "seconds": 0.0, "timeout": 120.0},
        {
            "type": "call",
            "side": "customer",
            "phase": "answered",
            "seconds": 41.5,
            "timeout": 120.0,
        },
    ]
    assert await run.events.acount() == 3  # nothing stored


async def test_a_reader_that_did_not_ask_for_calls_gets_none(run, alice_client):  # noqa: F811
    async with watching(run, client=alice_client) as socket:
        await frames(socket, 4)
        await _tell_calls(run)
        assert await socket.receive_nothing(timeout=0.5)


@pytest.mark.slow
def test_a_running_runs_calls_reach_its_page_as_they_wait(
    asgi_server, celery_worker, llm_server, alice, alice_client
):
    # Through the real worker: the runner tells each LLM call's start and end.
    gold_script(llm_server, delay=0.4)
    started = run_start(alice_client)
    calls: list[dict] = []
    cookie = f"sessionid={alice_client.cookies['sessionid'].value}"
    with connect(
        asgi_server.ws_url(f"/ws/runs/{started.pk}/?after=-1&calls=1"),
        additional_headers={"Cookie": cookie, "Origin": asgi_server.url},
        open_timeout=10,
    ) as ws:
        for _ in range(400):
            data = json.loads(ws.recv(timeout=30))
            if data["type"] == "call":
                calls.append(data)
            elif data["type"] == "status" and data["final"]:
                break
    done = wait_for(started, finished)
    assert done.reward == 1.0
    sides = {c["side"] for c in calls}
    assert {"agent", "customer"} <= sides, calls
    waiting = [c for c in calls if c["phase"] == "waiting"]
    answered = [c for c in calls if c["phase"] == "answered"]
    assert waiting and answered and all(c["seconds"] >= 0.4 for c in answered)


# --- A page opened mid-call (issue 33 item 4) -------------------------------------------------
# The call under way is kept per run (apps.runs.current_call), so a socket opened while the
# customer's model retries hears of it at once, not at the next retry or answer.


def _notice(phase: str, **more) -> gateway.CallNotice:
    return gateway.CallNotice(role="user", phase=phase, seconds=12.0, timeout=8.0, **more)


publish = database_sync_to_async(call_publish)


async def test_a_page_opened_mid_call_hears_the_retry_under_way_at_once(run, alice_client):  # noqa: F811
    await publish(
        run_id=run.pk,
        notice=_notice("retrying", attempt=2, attempts=3, reason="timed out after 8 s", wait=0.0),
    )
    socket = communicator(run.pk, client=alice_client, after="2&calls=1")
    connected, _ = await socket.connect(timeout=10)
    assert connected
    try:
        status, call = await frames(socket, 2)
    finally:
        await socket.disconnect(timeout=10)
    assert status["type"] == "status" and not status["final"]
    assert call["seconds"] >= 12.0  # the time since it was kept is added
    del call["seconds"]
    assert call == {
        "type": "call",
        "side": "customer",
        "phase": "retrying",
        "timeout": 8.0,
        "attempt": 2,
        "attempts": 3,
        "reason": "timed out after 8 s",
        "wait": 0.0,
    }


async def test_the_live_copy_of_the_notice_sent_on_connect_is_not_sent_again(
    run,  # noqa: F811
    alice_client,
    monkeypatch,
):
    """The worker's live notice can reach the group while the socket connects (joined
    first, then the kept record read): the page hears the retry once, then what follows."""
    from apps.runs import consumers

    second = _notice("retrying", attempt=2, attempts=3, reason="timed out after 8 s", wait=0.0)
    await publish(run_id=run.pk, notice=second)

    def read_then_the_live_copy_arrives(*, run_id):
        kept = current_call.call_current(run_id=run_id)
        call_publish(run_id=run_id, notice=second)  # the same notice, live, mid-connect
        return kept

    monkeypatch.setattr(consumers, "call_current", read_then_the_live_copy_arrives)
    socket = communicator(run.pk, client=alice_client, after="2&calls=1")
    connected, _ = await socket.connect(timeout=10)
    assert connected
    try:
        status, kept = await frames(socket, 2)
        await publish(
            run_id=run.pk,
            notice=_notice("retrying", attempt=3, attempts=3, reason="timed out after 8 s"),
        )
        calls = [kept, *await frames(socket, 1)]
        assert await socket.receive_nothing(timeout=0.5)
    finally:
        await socket.disconnect(timeout=10)
    assert status["type"] == "status"
    assert [(c["phase"], c["attempt"]) for c in calls] == [("retrying", 2), ("retrying", 3)]


@pytest.mark.parametrize("ending", ["answered", "failed", "run ended"])
async def test_a_page_opened_after_the_call_ended_hears_of_no_call(run, alice_client, ending):  # noqa: F811
    await publish(run_id=run.pk, notice=_notice("waiting", attempt=1, attempts=3))
    assert current_call.call_current(run_id=run.pk) is not None
    if ending == "run ended":
        finished_now = await database_sync_to_async(run_finish)(
            run=run, status=Run.Status.STOPPED, termination_reason="stopped"
        )
        assert finished_now
    else:
        await publish(run_id=run.pk, notice=_notice(ending, attempt=1, attempts=1))
    assert current_call.call_current(run_id=run.pk) is None
    socket = communicator(run.pk, client=alice_client, after="2&calls=1")
    connected, _ = await socket.connect(timeout=10)
    assert connected
    try:
        (status,) = await frames(socket, 1)
        assert status["type"] == "status"
        assert await socket.receive_nothing(timeout=0.5)
    finally:
        await socket.disconnect(timeout=10)


def test_a_kept_call_lasts_no_longer_than_its_attempts_left_may_take(run):  # noqa: F811
    call_publish(run_id=run.pk, notice=_notice("retrying", attempt=2, attempts=3, wait=7.0))
    ttl = current_call.record_ttl(current_call.call_current(run_id=run.pk) or {})
    assert ttl == 7.0 + 2 * 8.0 + current_call.MARGIN_SECONDS
    key = current_call._key(run.pk)
    left_ms = redis.Redis.from_url(settings.REDIS_URL).pttl(key)
    assert 0 < left_ms <= ttl * 1000
    # The turn tried again by the worker: its wait and one attempt's timeout.
    call_publish(run_id=run.pk, notice=_notice("again", attempt=2, attempts=2, wait=30.0))
    assert 0 < redis.Redis.from_url(settings.REDIS_URL).pttl(key) <= (30 + 8 + 5) * 1000


def test_a_kept_call_reads_as_it_stands_now_its_time_on_and_its_wait_spent(run):  # noqa: F811
    # Kept during a provider's Retry-After of 7 s; read 3 s later.
    call_publish(
        run_id=run.pk,
        notice=_notice(
            "retrying", attempt=2, attempts=3, reason="rate limited (HTTP 429)", wait=7.0
        ),
    )
    kept = json.loads(current_call._store().get(current_call._key(run.pk)) or "{}")
    later = kept["at"] + 3.0
    current = current_call.call_current(run_id=run.pk, now=later) or {}
    assert (current["seconds"], current["wait"]) == (15.0, 4.0)
    current = current_call.call_current(run_id=run.pk, now=later + 10) or {}
    assert current["wait"] == 0.0  # the next attempt is under way

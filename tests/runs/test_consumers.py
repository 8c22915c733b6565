"""The live run page's consumer, through the real ``tau2site.asgi.application`` with Channels'
``WebsocketCommunicator`` and the production channel layer (channels_redis).

alice owns a running run, bob is on her team, charlie is anonymous. Events are stored
straight into the database and announced on the run's group as ``apps.runs.events``
announces them, so each test says exactly which group messages the consumer got.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.test import Client
from django.utils import timezone

from apps.runs.events import EventMessage, StatusMessage, group_name
from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tests.support.websockets import ORIGIN, WebsocketCommunicator, session_headers

# Seconds to wait for a frame: the consumer reads the database in a thread pool, and the
# machine may be a loaded 2-core one.
TIMEOUT = 10


@pytest.fixture
def run(alice) -> Run:
    """alice's model run on airline/27, running, with events 0, 1 and 2 stored."""
    run = Run.objects.create(
        task=Task.objects.get(domain_id="airline", task_id="27"),
        domain="airline",
        created_by=alice,
        agent_model="org/model-a",
        user_model="u/m",
        status=Run.Status.RUNNING,
        started_at=timezone.now(),
    )
    _store(run, 3)
    return run


def _store(run: Run, count: int) -> list[int]:
    """Store ``count`` more events (without announcing them); returns their seqs."""
    start = run.events.count()
    seqs = list(range(start, start + count))
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run,
            seq=seq,
            kind=RunEvent.Kind.AGENT if seq % 2 == 0 else RunEvent.Kind.CUSTOMER,
            message={"role": "assistant" if seq % 2 == 0 else "user", "content": f"line {seq}"},
        )
        for seq in seqs
    )
    Run.objects.filter(pk=run.pk).update(n_messages=start + count)
    return seqs


store = database_sync_to_async(_store)


@database_sync_to_async
def complete(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(
        status=Run.Status.COMPLETED,
        finished_at=timezone.now(),
        termination_reason="user_stop",
        reward=1.0,
        reward_info={"reward": 1.0, "reward_basis": ["DB"], "reward_breakdown": {"DB": 1.0}},
    )


async def announce_event(run: Run, seq: int) -> None:
    await get_channel_layer().group_send(
        group_name(run.pk), EventMessage(type="run.event", run_id=run.pk, seq=seq)
    )


async def announce_status(run: Run) -> None:
    await get_channel_layer().group_send(
        group_name(run.pk), StatusMessage(type="run.status", run_id=run.pk)
    )


def communicator(
    run_pk: int, *, client: Client | None = None, after: str | None = None, origin=ORIGIN
) -> WebsocketCommunicator:
    """A socket to ``/ws/runs/<run_pk>/`` as ``client``'s person (anonymous without one)."""
    from tau2site.asgi import application

    headers = session_headers(client, origin=origin)
    path = f"/ws/runs/{run_pk}/" + ("" if after is None else f"?after={after}")
    return WebsocketCommunicator(application, path, headers=headers)


@asynccontextmanager
async def watching(run: Run, *, client: Client | None = None, after: str | None = None):
    """An accepted socket on ``run``, closed afterwards whatever the test did."""
    socket = communicator(run.pk, client=client, after=after)
    connected, code = await socket.connect(timeout=TIMEOUT)
    assert connected, f"the socket was closed with {code}"
    try:
        yield socket
    finally:
        await socket.disconnect(timeout=TIMEOUT)


async def frames(socket: WebsocketCommunicator, count: int) -> list[dict]:
    return [await socket.receive_json_from(timeout=TIMEOUT) for _ in range(count)]


def seqs_then_status(received: list[dict]) -> tuple[list[int], dict]:
    """The seqs of the event frames, and the one status frame that must come last."""
    *events, status = received
    assert all(frame["type"] == "event" for frame in events), received
    assert status["type"] == "status", received
    return [frame["seq"] for frame in events], status


async def refused_with(socket: WebsocketCommunicator) -> int | None:
    connected, code = await socket.connect(timeout=TIMEOUT)
    return None if connected else code


# --- Who may watch ------------------------------------------------------------------------


async def test_charlie_anonymous_is_closed_with_4403(run, settings):
    settings.TAU2_PUBLIC_RUNS = False
    assert await refused_with(communicator(run.pk)) == 4403


async def test_a_deactivated_member_is_closed_with_4403(run, bob, bob_client, settings):
    settings.TAU2_PUBLIC_RUNS = False
    bob.is_active = False
    await database_sync_to_async(bob.save)()
    assert await refused_with(communicator(run.pk, client=bob_client)) == 4403


async def test_a_run_that_does_not_exist_is_closed_with_4403(run, alice_client):
    missing = run.pk
    await database_sync_to_async(run.delete)()
    assert await refused_with(communicator(missing, client=alice_client)) == 4403


async def test_a_socket_opened_from_another_origin_is_refused(run, alice_client):
    socket = communicator(run.pk, client=alice_client, origin=b"https://evil.example")
    assert await refused_with(socket) is not None


async def test_charlie_watches_without_a_stop_button_when_runs_are_public(run, settings):
    settings.TAU2_PUBLIC_RUNS = True
    async with watching(run) as socket:
        seqs, status = seqs_then_status(await frames(socket, 4))
    assert seqs == [0, 1, 2]
    assert status["status"] == "running" and 'data-testid="stop"' not in status["html"]


# --- What a connecting viewer gets --------------------------------------------------------


async def test_bob_on_alices_team_gets_the_events_after_his_last_seq_then_the_status(
    run, bob_client
):
    async with watching(run, client=bob_client, after="0") as socket:
        received = await frames(socket, 3)
        assert await socket.receive_nothing(timeout=0.5)
    seqs, status = seqs_then_status(received)
    assert seqs == [1, 2]
    assert 'data-testid="event"' in received[0]["html"] and "line 1" in received[0]["html"]
    assert (status["status"], status["final"]) == ("running", False)
    # Only alice, who started it, or staff may stop it: bob's status line has no Stop.
    assert 'data-testid="stop"' not in status["html"]


@pytest.mark.parametrize("after", [None, "", "nonsense"])
async def test_without_a_usable_after_a_viewer_gets_every_stored_event(run, alice_client, after):
    async with watching(run, client=alice_client, after=after) as socket:
        seqs, _ = seqs_then_status(await frames(socket, 4))
    assert seqs == [0, 1, 2]


async def test_a_viewer_who_has_seen_everything_gets_only_the_status(run, alice_client):
    async with watching(run, client=alice_client, after="2") as socket:
        seqs, status = seqs_then_status(await frames(socket, 1))
        assert await socket.receive_nothing(timeout=0.5)
    assert seqs == [] and status["final"] is False


# --- Live group messages ------------------------------------------------------------------
# A run.event brings every event after the last one sent, then the status line (its
# counters changed with them). Each test ends on a fresh event: anything an earlier
# message caused would have arrived before it. The fresh event is stored only once the
# frames of the earlier messages are in: the consumer reads what is stored when it
# handles a message, so an event stored sooner can come with the earlier batch
# (3, 4, 5, 6, status) and its own message then rightly brings nothing.


def kinds(received: list[dict]) -> list[int | str]:
    """Each frame as its seq (events) or "status"."""
    return [frame["seq"] if frame["type"] == "event" else frame["type"] for frame in received]


async def test_a_live_event_is_sent_once_and_a_stale_seq_sends_nothing(run, alice_client):
    async with watching(run, client=alice_client, after="2") as socket:
        await frames(socket, 1)  # the status on connect
        (seq,) = await store(run, 1)
        await announce_event(run, seq)
        await announce_event(run, seq)  # announced twice
        await announce_event(run, 1)  # long seen
        brought = await frames(socket, 2)
        (last,) = await store(run, 1)
        await announce_event(run, last)
        then = await frames(socket, 2)
        assert await socket.receive_nothing(timeout=0.5)
    assert kinds(brought) == [3, "status"] and kinds(then) == [4, "status"]
    assert "line 3" in brought[0]["html"] and brought[1]["final"] is False


async def test_one_message_for_the_last_seq_of_a_batch_delivers_the_whole_batch_in_order(
    run, alice_client
):
    async with watching(run, client=alice_client, after="2") as socket:
        await frames(socket, 1)
        batch = await store(run, 4)
        await announce_event(run, batch[-1])
        received = await frames(socket, 5)
        assert await socket.receive_nothing(timeout=0.5)
    assert batch == [3, 4, 5, 6]
    assert kinds(received) == [*batch, "status"]
    assert "<span>7 messages</span>" in received[-1]["html"]


async def test_late_messages_for_events_a_batch_already_brought_send_nothing(run, alice_client):
    async with watching(run, client=alice_client, after="2") as socket:
        await frames(socket, 1)
        batch = await store(run, 3)
        for seq in batch:  # one message per event, as the publisher once sent
            await announce_event(run, seq)
        brought = await frames(socket, 4)  # the first message brings the whole batch
        (last,) = await store(run, 1)
        await announce_event(run, last)
        then = await frames(socket, 2)
        assert await socket.receive_nothing(timeout=0.5)
    assert kinds(brought) == [3, 4, 5, "status"] and kinds(then) == [6, "status"]


async def test_events_stored_while_reconnecting_come_before_the_new_live_ones(run, alice_client):
    # The page had seen 0..2 and lost its socket; 3 was stored (and announced to nobody).
    await store(run, 1)
    async with watching(run, client=alice_client, after="2") as socket:
        on_connect = await frames(socket, 2)
        (seq,) = await store(run, 1)
        await announce_event(run, seq)
        live = await frames(socket, 2)
    assert kinds(on_connect) == [3, "status"] and kinds(live) == [4, "status"]


async def test_the_status_says_final_once_the_run_is_completed(run, alice_client):
    async with watching(run, client=alice_client, after="2") as socket:
        connected = await socket.receive_json_from(timeout=TIMEOUT)
        await announce_status(run)
        still_running = await socket.receive_json_from(timeout=TIMEOUT)
        await complete(run)
        await announce_status(run)
        done = await socket.receive_json_from(timeout=TIMEOUT)
    assert connected["final"] is False and still_running["final"] is False
    assert still_running["status"] == "running"
    assert done["type"] == "status" and done["status"] == "completed" and done["final"] is True
    assert 'data-testid="reward"' in done["html"] and 'data-testid="stop"' not in done["html"]


# --- Keepalives ---------------------------------------------------------------------------
# Issue 33: the run, race and play pages close a socket silent for 30 s (their watchdog)
# and reopen it, while a model call may take 60 s: "Reconnecting…" flickered. The
# consumer now speaks every KEEPALIVE_SECONDS (15 s; shortened here) while the run is live.


@pytest.fixture
def quick_keepalives(monkeypatch):
    from apps.runs.consumers import RunConsumer

    monkeypatch.setattr(RunConsumer, "KEEPALIVE_SECONDS", 0.3)


async def test_a_quiet_running_socket_gets_keepalives_and_is_never_closed(
    run, alice_client, quick_keepalives
):
    async with watching(run, client=alice_client, after="2") as socket:
        assert (await socket.receive_json_from(timeout=TIMEOUT))["type"] == "status"
        assert kinds(await frames(socket, 4)) == ["keepalive"] * 4
        # An event is stored and its message lost (never announced): a tick sends it.
        (seq,) = await store(run, 1)
        while (frame := await socket.receive_json_from(timeout=TIMEOUT))["type"] == "keepalive":
            pass
        assert (frame["type"], frame["seq"]) == ("event", seq)
        assert (await socket.receive_json_from(timeout=TIMEOUT))["type"] == "status"
        assert (await socket.receive_json_from(timeout=TIMEOUT))["type"] == "keepalive"


async def test_a_lost_final_status_comes_with_a_tick_and_then_the_socket_is_quiet(
    run, alice_client, quick_keepalives
):
    async with watching(run, client=alice_client, after="2") as socket:
        await frames(socket, 2)  # the status, a keepalive
        await complete(run)  # and nobody announces it
        while (frame := await socket.receive_json_from(timeout=TIMEOUT))["type"] == "keepalive":
            pass
        assert (frame["type"], frame["final"]) == ("status", True)
        # A finished run needs no keepalive: the page has closed its socket by now.
        assert await socket.receive_nothing(timeout=1.5)


async def test_a_finished_run_gets_no_keepalives(run, alice_client, quick_keepalives):
    await complete(run)
    async with watching(run, client=alice_client, after="2") as socket:
        status = await socket.receive_json_from(timeout=TIMEOUT)
        assert await socket.receive_nothing(timeout=1.5)
    assert status["final"] is True


async def test_a_run_tried_again_after_its_end_gets_keepalives_again(
    run, alice_client, quick_keepalives
):
    await complete(run)
    async with watching(run, client=alice_client, after="2") as socket:
        assert (await socket.receive_json_from(timeout=TIMEOUT))["final"] is True
        assert await socket.receive_nothing(timeout=1)
        # An evaluation's retry queues the run again and a worker takes it up.
        await database_sync_to_async(Run.objects.filter(pk=run.pk).update)(
            status=Run.Status.RUNNING, finished_at=None
        )
        await announce_status(run)
        assert (await socket.receive_json_from(timeout=TIMEOUT))["final"] is False
        assert kinds(await frames(socket, 2)) == ["keepalive"] * 2

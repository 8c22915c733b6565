"""A run's LLM call shown while it happens (issue 33): the worker's ``run.call`` group
message reaches alice's live page as a passing ``call`` frame, never stored; the runner
tells each call's start and end (``tau2_env.llm.gateway.observe_calls``)."""

from __future__ import annotations

import json

import pytest
from channels.layers import get_channel_layer
from websockets.sync.client import connect

from apps.runs.events import CallMessage, group_name
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

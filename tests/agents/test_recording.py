"""Agent episodes in the history: an episode played with a studio API key, over MCP or
OpenEnv's /ws, is a run of kind "agent via API" — stored and streamed hop by hop, scored
by τ²'s evaluator, in the history, exports and compare; an abandoned one is stopped with
the reason; one whose server vanished is stopped by the reaper, never re-queued."""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from websockets.asyncio.client import connect

from apps.agents import recording
from apps.agents.credentials import install
from apps.agents.services import api_key_create
from apps.runs.lifecycle import runs_reap
from apps.runs.models import Run
from tests.support.agents import agent_runs_of
from tests.support.mcp_client import mcp_session
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import GOLD_CALLS, GOLD_CERTIFICATE, GOLD_CLOSING, gold_script

GOLD_USER = "ethan_martin_2396"


@pytest.fixture(autouse=True)
def studio_keys():
    install()


@pytest.fixture
def alice_key(alice):
    return api_key_create(user=alice, name="trainer")[1]


def _events(run: Run) -> list[dict]:
    return [e.message for e in run.events.order_by("seq")]


async def _run_socket(asgi_server, client, run_id: int):
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    return await connect(
        asgi_server.ws_url(f"/ws/runs/{run_id}/"),
        additional_headers={"Cookie": cookie, "Origin": asgi_server.url},
        open_timeout=10,
    )


async def _read_until(ws, predicate, *, timeout: float = 30.0) -> list[dict]:
    """Frames of the run's socket until one satisfies ``predicate`` (included)."""
    frames = []
    async with asyncio.timeout(timeout):
        while True:
            frame = json.loads(await ws.recv())
            frames.append(frame)
            if predicate(frame):
                return frames


def _seq_at_least(n: int):
    return lambda frame: frame["type"] == "event" and frame["seq"] >= n


async def test_a_keyed_mcp_golden_episode_is_an_agent_run_streamed_live_and_scored_by_tau2(
    asgi_server, llm_server, alice, alice_client, alice_key
):
    gold_script(llm_server)
    url = f"{asgi_server.url}/agent/mcp?task_id=27&agent=my-rl-agent/0.3"
    async with mcp_session(url, token=alice_key) as session:
        await session.call_tool("start", {})
        (run,) = await sync_to_async(agent_runs_of)(alice, final=False)
        ws = await _run_socket(asgi_server, alice_client, run.pk)
        opening = await _read_until(ws, _seq_at_least(1))  # τ²'s greeting, the customer
        assert await sync_to_async(lambda: Run.objects.get(pk=run.pk).status)() == "running"

        await session.call_tool("get_user_details", {"user_id": GOLD_USER})
        # Streamed while the episode is open: the call and its result, before the next.
        live = await _read_until(ws, _seq_at_least(3))
        if GOLD_CERTIFICATE:  # τ² 0.2's task 27 owes it; 1.x's none
            await session.call_tool("send_certificate", {"user_id": GOLD_USER, "amount": 150})
            await _read_until(ws, _seq_at_least(5))
        final = await session.call_tool("respond_to_user", {"message": GOLD_CLOSING})
        ended = await _read_until(ws, lambda f: f["type"] == "status" and f["final"])
        await ws.close()

    verdict = final.structuredContent
    assert verdict["reward"] == 1.0
    (run,) = await sync_to_async(agent_runs_of)(alice)
    events = await sync_to_async(_events)(run)
    assert (run.kind, run.status, run.reward) == ("agent", "completed", 1.0)
    assert run.agent_model == "my-rl-agent/0.3" and run.created_by_id == alice.pk
    assert run.reward_info == verdict["reward_info"]  # τ²'s evaluator's own breakdown
    assert events == verdict["messages"] and run.n_messages == len(events)
    assert run.provenance["agent"]["face"] == "mcp" and run.provenance["task_id"] == "27"
    assert [f["seq"] for f in live if f["type"] == "event"][-1] >= 3
    assert any(f["type"] == "event" and f["seq"] == 0 for f in opening)
    assert 'data-testid="reward"' in ended[-1]["html"]
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}

    history = await sync_to_async(alice_client.get)("/runs/?kind=agent")
    assert f'data-run-id="{run.pk}"' in history.content.decode()
    models = await sync_to_async(alice_client.get)("/runs/?kind=model")
    assert f'data-run-id="{run.pk}"' not in models.content.decode()
    page = await sync_to_async(alice_client.get)(f"/runs/{run.pk}/")
    assert page.status_code == 200 and "my-rl-agent/0.3" in page.content.decode()
    export = await sync_to_async(alice_client.get)(f"/runs/{run.pk}.json")
    assert export.status_code == 200
    assert ALICE_TOKEN not in export.content.decode() and alice_key not in page.content.decode()


async def test_a_keyed_openenv_ws_episode_is_recorded_likewise(
    asgi_server, llm_server, alice, alice_client, alice_key
):
    gold_script(llm_server)
    headers = {"Authorization": f"Bearer {alice_key}", "X-Tau2-Agent": "gym-policy"}
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:

        async def send(kind, data):
            await ws.send(json.dumps({"type": kind, "data": data}))
            return json.loads(await ws.recv())

        await send("reset", {"task_id": "27"})
        for name, arguments in (*GOLD_CALLS, ("respond_to_user", {"message": GOLD_CLOSING})):
            step = await send(
                "step", {"type": "call_tool", "tool_name": name, "arguments": arguments}
            )

    assert step["data"]["done"] is True and step["data"]["reward"] == 1.0
    (run,) = await sync_to_async(agent_runs_of)(alice)
    events = await sync_to_async(_events)(run)
    assert (run.status, run.reward, run.agent_model) == ("completed", 1.0, "gym-policy")
    assert run.provenance["agent"]["face"] == "openenv"
    assert run.reward_info == step["data"]["observation"]["metadata"]["reward_info"]
    assert events == step["data"]["observation"]["metadata"]["messages"]

    # Compare holds an agent run beside another run.
    other = await sync_to_async(api_key_create)(user=alice, name="second")
    async with connect(
        asgi_server.ws_url("/ws"), additional_headers={"Authorization": f"Bearer {other[1]}"}
    ) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "27"}}))
        await ws.recv()
    first, second = await sync_to_async(agent_runs_of)(alice, count=2)
    compare = await sync_to_async(alice_client.get)(f"/runs/compare/?ids={first.pk},{second.pk}")
    assert compare.status_code == 200


async def test_an_abandoned_episode_ends_its_run_stopped_with_the_reason(
    asgi_server, llm_server, alice, alice_key
):
    gold_script(llm_server)
    async with mcp_session(f"{asgi_server.url}/agent/mcp?task_id=27", token=alice_key) as session:
        await session.call_tool("start", {})
        await session.call_tool("get_user_details", {"user_id": GOLD_USER})
    # The SDK client closed its session (DELETE) mid-episode.
    async with connect(
        asgi_server.ws_url("/ws"), additional_headers={"Authorization": f"Bearer {alice_key}"}
    ) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "27"}}))
        await ws.recv()
    # …and the OpenEnv client just went away.

    mcp_run, ws_run = await sync_to_async(agent_runs_of)(alice, count=2)
    assert (mcp_run.status, mcp_run.error) == ("stopped", "The MCP session was closed.")
    assert ws_run.status == "stopped" and ws_run.error
    assert mcp_run.reward is None and mcp_run.n_messages == 4
    assert mcp_run.lease_expires_at is None


async def test_stop_on_the_run_page_ends_the_recording_at_the_next_hop(
    asgi_server, llm_server, alice, alice_client, alice_key
):
    gold_script(llm_server)
    async with mcp_session(f"{asgi_server.url}/agent/mcp?task_id=27", token=alice_key) as session:
        await session.call_tool("start", {})
        (run,) = await sync_to_async(agent_runs_of)(alice, final=False)
        stopped = await sync_to_async(alice_client.post)(f"/runs/{run.pk}/stop/")
        details = await session.call_tool("get_user_details", {"user_id": GOLD_USER})
        (run,) = await sync_to_async(agent_runs_of)(alice)
        more = await session.call_tool("send_certificate", {"user_id": GOLD_USER, "amount": 150})

    assert stopped.status_code == 302
    assert (run.status, run.termination_reason) == ("stopped", "stopped")
    assert not details.isError and not more.isError  # the agent's episode went on
    await asyncio.sleep(0.5)
    assert await sync_to_async(lambda: Run.objects.get(pk=run.pk).n_messages)() == run.n_messages


def test_episodes_without_a_key_stay_unrecorded(alice, llm_server):
    from tau2_env.gate import access

    credentials = access.resolve_credentials(access.ClientRequest(hf_token="hf_own_token"))

    assert credentials.hooks is None and credentials.hf_token == "hf_own_token"


def test_the_reaper_stops_a_lost_agent_run_and_never_requeues_it(alice):
    from apps.tasks.models import Task

    task = Task.objects.get(domain_id="airline", task_id="27")

    def agent_run(worker: str, lease: timedelta) -> Run:
        return Run.objects.create(
            kind=Run.Kind.AGENT,
            status=Run.Status.RUNNING,
            task=task,
            domain="airline",
            created_by=alice,
            agent_model="agent via API",
            user_model="m",
            worker=worker,
            lease_expires_at=timezone.now() + lease,
        )

    run = agent_run("agent:mcp:gone", timedelta(seconds=-1))
    alive = agent_run("agent:mcp:here", timedelta(minutes=5))

    assert runs_reap() == []
    run.refresh_from_db()
    alive.refresh_from_db()
    assert run.status == "stopped" and "lost" in run.error
    assert alive.status == "running"


def test_a_stopping_process_waits_for_the_recordings_still_queued():
    serial = recording._Serial()
    started, release, done = threading.Event(), threading.Event(), []

    def write():
        started.set()
        release.wait(5)
        done.append("stored")

    serial.submit(write)
    assert started.wait(5)
    assert recording.recordings_drain(timeout=0.1) is False  # still writing
    threading.Timer(0.2, release.set).start()
    assert recording.recordings_drain(timeout=5) is True
    assert done == ["stored"]


async def test_the_lifespan_shutdown_drains_the_recordings_first(monkeypatch):
    from tau2site import asgi

    calls = []
    monkeypatch.setattr(asgi, "recordings_drain", lambda *, timeout: calls.append(timeout))
    monkeypatch.setattr(asgi.embedded_worker, "start", lambda: calls.append("worker start"))
    monkeypatch.setattr(asgi.embedded_worker, "stop", lambda: calls.append("worker stop"))
    for kind in ("lifespan.startup", "lifespan.shutdown"):
        await asgi.on_lifespan({"type": kind})
    assert calls == ["worker start", asgi.RECORDINGS_DRAIN_S, "worker stop"]

"""Session caps across hosts: two routers (two "hosts", each ``python -m
tau2_env.gate.session_router tau2site.asgi:application`` as a deployment starts it) share one
ledger of open sessions in Redis (``TAU2_SLOTS_URL``).

A trainer's studio key made with a cap of 3 holds 3 sessions in all, wherever they land: the
fourth is refused on either host, and a closed one frees its slot for the other host. A
host killed outright (router and process, no goodbye) stops counting within its lease. And
processes racing for a client's last slot are granted exactly one of them, on the Redis
ledger and on the one-host SQLite file alike. A ledger out of reach refuses new sessions
(503, retry in 5 s) rather than grant them uncounted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from apps.agents.services import api_key_create
from tau2_env.config import ConfigError
from tau2_env.gate.capacity import CapacityReached
from tau2_env.gate.shared_slots import (
    FileSlotLedger,
    RedisSlotLedger,
    SharedSessionSlots,
    ledger_from_config,
)
from tests.support import processes, slot_racer

CAP = 3  # the trainer's key's own cap
LEASE = 6  # TAU2_SLOTS_LEASE_SECONDS: renewed every 2 s
LEDGER_URL = os.environ["REDIS_URL"]


@pytest.fixture(scope="module")
def two_hosts(django_db_setup, scripted_llm_session) -> Iterator[list[processes.Process]]:
    env = processes.environment(
        llm=scripted_llm_session,
        extra={
            "TAU2_SLOTS_URL": LEDGER_URL,
            "TAU2_SLOTS_LEASE_SECONDS": str(LEASE),
            "MAX_CONCURRENT_ENVS": "16",
        },
    )
    hosts = [
        processes.start_router(env, app="tau2site.asgi:application", processes=1) for _ in range(2)
    ]
    try:
        processes.wait_until_up(*hosts)
        yield hosts
    finally:
        for host in hosts:
            processes.stop(host)


@pytest.fixture
def trainer_key(alice) -> str:
    _, raw = api_key_create(user=alice, name="grpo", max_sessions=CAP)
    return raw


async def _open(stack: contextlib.AsyncExitStack, host: processes.Process, key: str):
    """An OpenEnv ``/ws`` session on ``host``: the connection and its first answer (a
    state, or the error sent instead of one)."""
    ws = await stack.enter_async_context(
        connect(host.ws_url("/ws"), additional_headers={"Authorization": f"Bearer {key}"})
    )
    with contextlib.suppress(ConnectionClosed):
        await ws.send(json.dumps({"type": "state"}))
    return ws, json.loads(await ws.recv())


async def _refused(host: processes.Process, key: str) -> dict:
    async with contextlib.AsyncExitStack() as stack:
        _, answer = await _open(stack, host, key)
    assert answer["type"] == "error", answer
    return answer["data"]


async def test_a_keys_cap_of_3_refuses_the_fourth_session_on_either_host(two_hosts, trainer_key):
    a, b = two_hosts
    async with contextlib.AsyncExitStack() as stack:
        held = [await _open(stack, host, trainer_key) for host in (a, b, a)]
        assert [answer["type"] for _, answer in held] == ["state"] * CAP

        for host in (a, b):  # each alone holds fewer than 3
            refusal = await _refused(host, trainer_key)
            assert refusal["code"] == "CAPACITY_REACHED"
            assert "this API key already has 3 open sessions (at most 3" in refusal["message"]
            assert refusal["retry_after"] >= 1

        # One closes on b: its slot is free at once, for a session on a.
        await held[1][0].close()
        async with contextlib.AsyncExitStack() as again:
            answer = await _eventually_open(again, a, trainer_key, within=2.0)
            assert answer["type"] == "state", answer
            assert (await _refused(b, trainer_key))["code"] == "CAPACITY_REACHED"


async def test_a_host_that_dies_stops_counting_within_its_lease(two_hosts, trainer_key):
    a, b = two_hosts
    async with contextlib.AsyncExitStack() as stack:
        on_a = [await _open(stack, a, trainer_key) for _ in range(2)]
        async with contextlib.AsyncExitStack() as on_b:
            _, answer = await _open(on_b, b, trainer_key)
            assert [x["type"] for _, x in on_a] + [answer["type"]] == ["state"] * CAP
            assert (await _refused(a, trainer_key))["code"] == "CAPACITY_REACHED"

            _kill_host(b)
            died = time.monotonic()
            # Its slot still counts while its lease runs (a host merely slow keeps its own).
            assert (await _refused(a, trainer_key))["code"] == "CAPACITY_REACHED"
            async with contextlib.AsyncExitStack() as later:
                answer = await _eventually_open(later, a, trainer_key, within=LEASE + 3.0)
                waited = time.monotonic() - died
            assert answer["type"] == "state", answer
            assert waited <= LEASE + 1.0, f"granted {waited:.1f} s after the host died"
            with contextlib.suppress(ConnectionClosed, OSError):
                await on_b.aclose()


async def _eventually_open(stack, host, key: str, *, within: float) -> dict:
    """Open a session on ``host``, asking again every 0.2 s while refused, for at most
    ``within`` seconds; returns the last answer."""
    deadline = time.monotonic() + within
    while True:
        attempt = contextlib.AsyncExitStack()
        _, answer = await _open(attempt, host, key)
        if answer["type"] != "error" or time.monotonic() > deadline:
            stack.push_async_exit(attempt)
            return answer
        await attempt.aclose()
        await asyncio.sleep(0.2)


def _kill_host(host: processes.Process) -> None:
    """The router and its OpenEnv processes die at once, releasing nothing: all stopped
    first (a process whose router vanished would see its sockets close and release its
    slots; a router whose process vanished would start it again), then killed."""
    children = [
        int(pid)
        for task in Path(f"/proc/{host.pid}/task").iterdir()
        for pid in (task / "children").read_text().split()
    ]
    assert children, "the router's OpenEnv process"
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in (host.pid, *children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    host.proc.wait(timeout=10)


# --- the last slot, raced ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redis", "sqlite"])
def test_two_processes_racing_for_the_last_slot_are_granted_exactly_one(kind, tmp_path):
    rounds = 40
    where = LEDGER_URL if kind == "redis" else str(tmp_path / "slots.sqlite3")
    clients = [f"key:race-{uuid.uuid4().hex[:8]}-{n}" for n in range(rounds)]
    ledger = slot_racer.ledger(kind, where)
    slots = SharedSessionSlots(ledger=ledger, total=2 * rounds, per_client=CAP, idle_seconds=300)
    mine = [slots.acquire(client) for client in clients for _ in range(CAP - 1)]

    spawn = multiprocessing.get_context("spawn")
    barrier, results, done = spawn.Barrier(2), spawn.Queue(), spawn.Event()
    racers = [
        spawn.Process(
            target=slot_racer.race, args=(kind, where, clients, CAP, barrier, results, done)
        )
        for _ in range(2)
    ]
    for racer in racers:
        racer.start()
    try:
        granted: dict[int, list[bool]] = {}
        for _ in range(2 * rounds):
            round_, won = results.get(timeout=120)
            granted.setdefault(round_, []).append(won)
        assert {n: sorted(wins) for n, wins in granted.items()} == {
            n: [False, True] for n in range(rounds)
        }
        assert [ledger.held(client) for client in clients] == [CAP] * rounds
    finally:
        done.set()
        for racer in racers:
            racer.join(timeout=60)
        for slot in mine:
            slots.release(slot)
    assert [racer.exitcode for racer in racers] == [0, 0]
    assert [ledger.held(client) for client in clients] == [0] * rounds
    if isinstance(ledger, RedisSlotLedger):
        ledger.close()


# --- the ledger's setting and its outage -------------------------------------------------


def test_a_ledger_that_cannot_be_reached_refuses_sessions_rather_than_count_none():
    nowhere = f"redis://127.0.0.1:{processes.free_port()}/0"
    slots = SharedSessionSlots(
        ledger=RedisSlotLedger(nowhere, lease_seconds=30, timeout=1),
        total=4,
        per_client=CAP,
        idle_seconds=300,
    )
    with pytest.raises(CapacityReached) as refused:
        slots.acquire("key:outage")
    assert refused.value.retry_after == 5
    assert "cannot be reached; retry in 5 s" in str(refused.value)
    assert slots.active == 0  # nothing kept here either


def test_the_ledger_is_redis_when_named_else_the_routers_file(monkeypatch, tmp_path):
    monkeypatch.setenv("TAU2_SLOTS_URL", LEDGER_URL)
    monkeypatch.setenv("TAU2_SLOTS_LEDGER", str(tmp_path / "slots.sqlite3"))
    assert isinstance(ledger_from_config(), RedisSlotLedger)  # every host's wins
    monkeypatch.delenv("TAU2_SLOTS_URL")
    assert isinstance(ledger_from_config(), FileSlotLedger)
    monkeypatch.delenv("TAU2_SLOTS_LEDGER")
    assert ledger_from_config() is None
    monkeypatch.setenv("TAU2_SLOTS_URL", "postgres://db/tau2")
    with pytest.raises(ConfigError, match="TAU2_SLOTS_URL must be a Redis URL"):
        ledger_from_config()

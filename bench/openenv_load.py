"""Load on the OpenEnv API: latency, errors and memory at 1 … 256 concurrent sessions.

Run by hand: ``.venv/bin/python bench/openenv_load.py [--sessions 1,8,64,256]
[--delays 0,1] [--scored 8]``. Everything listens on 127.0.0.1 only.

It starts (``bench/harness.py``) the scripted LLM (``tests.support.llm_server``) in a
child process and a real
uvicorn serving the product's ASGI app (``tau2site.asgi:application``; ``DEBUG=true``, a
temporary ``TAU2_VAR_DIR``, no ``DATABASE_URL``/``REDIS_URL``, no embedded Celery
worker, ``MAX_CONCURRENT_ENVS`` = the largest session count or 64) in another. Then, for
each LLM delay and concurrency N, N WebSocket sessions speak OpenEnv's ``/ws`` protocol
(raw ``websockets``: a 256-session client must stay lighter than the server it measures):

1. all connect, then all ``reset`` at once (airline; the customer's opening is one LLM
   call, so a reset includes one LLM delay);
2. each makes three database tool calls in a row (``get_user_details``,
   ``get_reservation_details``, ``get_flight_status``);
3. server RSS is read with all N sessions open (``VmRSS`` of the uvicorn process);
4. all ``respond_to_user`` at once (one LLM delay each) while one extra *probe*
   session calls ``get_user_details`` every 20 ms: tool latency while N sessions wait on
   their LLM;
5. ``--scored`` of them call ``done`` (τ²'s evaluator: CPU-bound, ~1 s each for
   airline, so not all 256), the others close.

With ``--keys`` every session plays with a studio API key (``Authorization: Bearer
tau2s_…``) whose owner's vault holds the session's token, so each episode is recorded as
an "agent via API" run (stored and published hop by hop): the database is migrated and
the catalogue loaded first (``manage.py bootstrap``, SQLite in the temporary
``TAU2_VAR_DIR``), and the channel layer is in memory. Compare with a run without it.
With ``--one-key`` every session, the probe's too, plays with one studio key made with
its own cap (the largest session count + 1; ``TAU2_SESSIONS_PER_KEY_MAX`` raised to it),
as a GRPO trainer's batch does: its owner's vault holds one token, so a single LLM delay
(``--delays``) serves every phase.

The LLM's delay is chosen per session by its token (``hf_bench_<ms>_<n>``), so one
stateless LLM process serves every phase. Per phase it prints p50/p95 of each step, the
platform's overhead (latency minus the LLM's delay), errors and RSS per open session,
then each target of issue 3 item 8 with the measured value, the ratio to the target and
the original OpenEnv Space's number.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/openenv_load.py
from bench import harness  # noqa: E402 - after the path
from bench.harness import percentile_rounded as pct  # noqa: E402
from tests.support.llm_server import ScriptedLLM, delayed  # noqa: E402
from tests.support.processes import Process, stop  # noqa: E402

USERS = [
    "mia_li_3668",
    "mei_hernandez_8984",
    "aarav_nguyen_1055",
    "chen_hernandez_2608",
    "lucas_hernandez_8985",
    "sophia_taylor_9065",
    "liam_santos_5621",
    "olivia_smith_4705",
]
TASK_ID = "2"  # an airline task; any would do, the customer is scripted
STEP_TIMEOUT_S = 120.0
PHASE_TIMEOUT_S = 240.0
PROBE_INTERVAL_S = 0.02
PROBE_MAX_CALLS = 500
KEYS: dict[str, str] = {}  # token → studio API key (--keys)
ms = partial(harness.ms, tenths=True)  # one decimal under 100 ms


# ------------------------------------------------------------------ the scripted LLM


def token_delays(llm: ScriptedLLM, *, delay: float) -> None:
    """The scripted LLM for ``harness.LLMProcess``: the delay comes from the caller's
    token (``hf_bench_<ms>_…``), not from ``delay``."""

    def responder(request):
        token = request.token or ""
        parts = token.split("_")
        delay = int(parts[2]) / 1000 if len(parts) > 3 and parts[1] == "bench" else 0.0
        return delayed("Hi, I'd like to change my reservation, please.", delay)

    llm.responder = responder


# ------------------------------------------------------------------ the server


KEYS_SETUP = """
import json, sys
from django.contrib.auth import get_user_model
from apps.accounts.services import credential_store
from apps.agents.services import api_key_create
keys = {}
for token in json.load(sys.stdin):
    user = get_user_model().objects.create_user(username=token[:150])
    granted = {"access_token": token, "expires_in": 86400, "scope": "openid inference-api"}
    credential_store(user=user, token_response=granted)
    keys[token] = api_key_create(user=user, name="bench")[1]
print(json.dumps(keys))
"""


ONE_KEY_SETUP = """
import json, sys
from django.contrib.auth import get_user_model
from apps.accounts.services import credential_store
from apps.agents.services import api_key_create
token, cap = json.load(sys.stdin)
user = get_user_model().objects.create_user(username="trainer")
granted = {"access_token": token, "expires_in": 86400, "scope": "openid inference-api"}
credential_store(user=user, token_response=granted)
print(json.dumps(api_key_create(user=user, name="trainer", max_sessions=cap)[1]))
"""
ONE_KEY: list[str] = []  # --one-key: the key every session plays with


def make_one_key(env: dict[str, str], token: str, cap: int) -> str:
    """One person whose vault holds ``token``, with a studio key holding ``cap`` sessions."""
    harness.manage(env, "bootstrap")
    done = harness.manage(env, "shell", "-c", ONE_KEY_SETUP, input=json.dumps([token, cap]))
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_keys(env: dict[str, str], tokens: list[str]) -> dict[str, str]:
    """A person per token (their vault holds it) with a studio key: token → key."""
    harness.manage(env, "bootstrap")
    done = harness.manage(env, "shell", "-c", KEYS_SETUP, input=json.dumps(tokens))
    return json.loads(done.stdout.strip().splitlines()[-1])


RECORDED = """
from collections import Counter
from apps.runs.models import Run, RunEvent
runs = Run.objects.filter(kind="agent")
statuses = dict(Counter(runs.values_list("status", flat=True)))
messages = RunEvent.objects.filter(run__kind="agent").count()
print(f"recorded: {runs.count()} agent runs {statuses}, {messages} messages")
"""


def print_recorded(env: dict[str, str]) -> None:
    """--keys: what the recorder stored (every episode a run, every message an event)."""
    done = harness.manage(env, "shell", "-c", RECORDED, check=False)
    print((done.stdout.strip().splitlines() or [done.stderr[-300:]])[-1])


def cpu_s(pid: int) -> float:
    """The process's CPU time so far (its threads included), in seconds: to the
    nanosecond from its live threads' ``schedstat``, unless ``stat``'s user + system
    times (clock ticks, 10 ms, but counting threads that ended) say more — both count
    less than was spent, so the larger is the nearer."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    precise = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that ended meanwhile
            precise += int((task / "schedstat").read_text().split()[0])
    return max(ticks, precise / 1e9)


def _tree(pid: int) -> list[int]:
    """``pid`` and every descendant (uvicorn --workers, the router's processes)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def server_cpu(pid: int) -> float:
    """CPU seconds of the server: its process and every descendant."""
    total = 0.0
    for each in _tree(pid):
        with contextlib.suppress(OSError):
            total += cpu_s(each)
    return total


def rss_mib(pid: int) -> float:
    """Resident MiB of the server: its process and every descendant."""
    total = 0.0
    for each in _tree(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
    return total


# ------------------------------------------------------------------ one session


class StepError(Exception):
    pass


class Session:
    """One OpenEnv ``/ws`` session (raw protocol)."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        # --keys: the studio key of the token's owner; --one-key: the one key
        self.key = KEYS.get(token) or (ONE_KEY[0] if ONE_KEY else None)
        self.ws = None

    async def connect(self) -> None:
        import websockets

        headers = {"Authorization": f"Bearer {self.key}"} if self.key else None
        self.ws = await websockets.connect(
            self.url,
            max_size=None,
            open_timeout=STEP_TIMEOUT_S,
            ping_interval=None,
            additional_headers=headers,
        )

    async def _send(self, message: dict) -> dict:
        await self.ws.send(json.dumps(message))
        raw = await asyncio.wait_for(self.ws.recv(), STEP_TIMEOUT_S)
        answer = json.loads(raw)
        if answer.get("type") != "observation":
            raise StepError(str(answer.get("data"))[:200])
        return answer["data"]

    async def reset(self) -> dict:
        data = {"task_id": TASK_ID, "domain": "airline"}
        if not self.key:
            data["hf_token"] = self.token
        answer = await self._send({"type": "reset", "data": data})
        if not answer["observation"]["metadata"].get("user_message"):
            raise StepError(f"reset without an opening: {str(answer)[:200]}")
        return answer

    async def tool(self, name: str, **arguments) -> str:
        step = {"type": "call_tool", "tool_name": name, "arguments": arguments}
        answer = await self._send({"type": "step", "data": step})
        observation = answer["observation"]
        if observation.get("error"):
            raise StepError(f"{name}: {observation['error']}")
        text = observation.get("data")
        if text is None:
            text = (observation.get("result") or {}).get("data")
        if name not in ("done", "respond_to_user") and str(text).startswith("Error"):
            raise StepError(f"{name}: {str(text)[:200]}")
        return text if isinstance(text, str) else json.dumps(text)

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):  # closing anyway
                await self.ws.send(json.dumps({"type": "close"}))
            await self.ws.close()
            self.ws = None


@dataclass
class Phase:
    sessions: int
    delay: float
    reset: list[float] = field(default_factory=list)
    tool: list[float] = field(default_factory=list)
    respond: list[float] = field(default_factory=list)
    probe: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss_before: float = 0.0
    rss_open: float = 0.0
    rss_after: float = 0.0
    seconds: float = 0.0
    # Server CPU seconds spent in each step (all its processes' /proc stat).
    cpu_reset: float = 0.0
    cpu_tool: float = 0.0
    cpu_respond: float = 0.0
    cpu_done: float = 0.0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    cpu_root: float = 0.0  # the server's first process alone (the router, with --processes)

    def exchanges(self) -> int:
        """Messages answered in the phase (each a frame in and one out)."""
        return (
            len(self.reset) + len(self.tool) + len(self.respond) + len(self.probe) + len(self.done)
        )

    def cpu_per_tool(self) -> float:
        return self.cpu_tool / max(1, len(self.tool))

    def cpu_per_turn(self) -> float:
        """Server CPU per respond_to_user: the respond step's CPU, less the probe's
        tool calls charged at the tool step's CPU per call."""
        probe = self.cpu_per_tool() * len(self.probe)
        return (self.cpu_respond - probe) / max(1, len(self.respond))

    @property
    def rss_per_session(self) -> float:
        return (self.rss_open - self.rss_before) / self.sessions


async def _timed(samples: list[float], coro):
    started = time.perf_counter()
    result = await coro
    samples.append(time.perf_counter() - started)
    return result


async def db_calls(session: Session, user_id: str, samples: list[float]) -> None:
    user = json.loads(await _timed(samples, session.tool("get_user_details", user_id=user_id)))
    reservation_id = user["reservations"][0]
    reservation = json.loads(
        await _timed(
            samples, session.tool("get_reservation_details", reservation_id=reservation_id)
        )
    )
    flight = reservation["flights"][0]
    await _timed(
        samples,
        session.tool(
            "get_flight_status", flight_number=flight["flight_number"], date=flight["date"]
        ),
    )


def phase_tokens(sessions: int, delay: float, serial: int) -> tuple[str, list[str]]:
    """The probe's token and the sessions' (the LLM reads its delay from them)."""
    ms = int(delay * 1000)
    return f"hf_bench_0_probe{serial}", [f"hf_bench_{ms}_{serial}x{i}" for i in range(sessions)]


async def run_phase(
    url: str, server_pid: int, sessions: int, delay: float, scored: int, serial: int
) -> Phase:
    phase = Phase(sessions=sessions, delay=delay)
    started = time.perf_counter()
    root_started = cpu_s(server_pid)
    phase.rss_before = rss_mib(server_pid)

    probe_token, tokens = phase_tokens(sessions, delay, serial)
    probe = Session(url, probe_token)
    await probe.connect()
    await probe.reset()

    clients = [Session(url, token) for token in tokens]
    alive: list[bool] = [True] * sessions

    async def guarded(i: int, coro) -> None:
        if not alive[i]:
            coro.close()
            return
        try:
            await coro
        except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
            alive[i] = False
            phase.errors.append(f"{type(exc).__name__}: {str(exc)[:160]}")

    async def all_of(make) -> None:
        await asyncio.gather(*(guarded(i, make(i)) for i in range(sessions)))

    cpu = partial(server_cpu, server_pid)
    await all_of(lambda i: clients[i].connect())
    mark = cpu()
    await all_of(lambda i: _timed(phase.reset, clients[i].reset()))
    mark, phase.cpu_reset = cpu(), cpu() - mark
    await all_of(lambda i: db_calls(clients[i], USERS[i % len(USERS)], phase.tool))
    mark, phase.cpu_tool = cpu(), cpu() - mark
    phase.rss_open = rss_mib(server_pid)

    responding = asyncio.ensure_future(
        all_of(
            lambda i: _timed(
                phase.respond,
                clients[i].tool("respond_to_user", message="Sure, what is your user id?"),
            )
        )
    )
    calls = 0
    while not responding.done() and calls < PROBE_MAX_CALLS:
        await _timed(phase.probe, probe.tool("get_user_details", user_id=USERS[0]))
        calls += 1
        await asyncio.sleep(PROBE_INTERVAL_S)
    await responding
    mark, phase.cpu_respond = cpu(), cpu() - mark

    await all_of(lambda i: _timed(phase.done, clients[i].tool("done")) if i < scored else _noop())
    phase.cpu_done = cpu() - mark
    phase.cpu_root = cpu_s(server_pid) - root_started
    phase.load = os.getloadavg()
    await asyncio.gather(*(c.close() for c in clients), probe.close(), return_exceptions=True)
    await asyncio.sleep(0.5)  # let the server drop the sessions
    phase.rss_after = rss_mib(server_pid)
    phase.seconds = time.perf_counter() - started
    return phase


async def _noop() -> None:
    return None


# ------------------------------------------------------------------ report


def print_table(phases: list[Phase]) -> None:
    head = (
        f"{'N':>4} {'LLM':>4} | {'reset p50/p95':>15} {'ovh p50':>7} | {'tool p50/p95':>13} | "
        f"{'respond p50/p95':>15} {'ovh p50':>7} | {'probe p50/p95':>13} | "
        f"{'done p50/p95':>13} | {'err':>3} | {'MiB/sess':>8} {'RSS open/after':>14} | {'s':>4}"
    )
    print("latencies in ms; ovh = latency minus the LLM's delay; probe = a DB tool call")
    print("while the N sessions wait on respond_to_user; done = τ²'s scoring (sampled)")
    print(head)
    print("-" * len(head))
    for p in phases:
        print(
            f"{p.sessions:>4} {p.delay:>3.0f}s | "
            f"{ms(pct(p.reset, 50)):>7}/{ms(pct(p.reset, 95)):<7} "
            f"{ms(pct(p.reset, 50) - p.delay):>7} | "
            f"{ms(pct(p.tool, 50)):>6}/{ms(pct(p.tool, 95)):<6} | "
            f"{ms(pct(p.respond, 50)):>7}/{ms(pct(p.respond, 95)):<7} "
            f"{ms(pct(p.respond, 50) - p.delay):>7} | "
            f"{ms(pct(p.probe, 50)):>6}/{ms(pct(p.probe, 95)):<6} | "
            f"{ms(pct(p.done, 50)):>6}/{ms(pct(p.done, 95)):<6} | "
            f"{len(p.errors):>3} | {p.rss_per_session:>8.2f} "
            f"{p.rss_open:>6.0f}/{p.rss_after:<7.0f} | {p.seconds:>4.0f}"
        )
    print()
    print("server CPU (its processes, /proc): per reset, per DB tool call, per customer turn")
    print("(respond step less the probe's calls), per done; load average at the phase's end")
    for p in phases:
        per_reset = p.cpu_reset / max(1, len(p.reset))
        per_done = p.cpu_done / max(1, len(p.done))
        print(
            f"{p.sessions:>4} {p.delay:>3.0f}s | reset {per_reset * 1000:6.1f} ms | "
            f"tool {p.cpu_per_tool() * 1000:5.2f} ms | turn {p.cpu_per_turn() * 1000:6.2f} ms | "
            f"done {per_done * 1000:6.0f} ms | load {p.load[0]:.2f} {p.load[1]:.2f} {p.load[2]:.2f}"
            f" | first process {p.cpu_root / max(1, p.exchanges()) * 1000:.3f} ms per message"
        )
    for p in phases:
        for error in sorted(set(p.errors))[:5]:
            print(f"  error at N={p.sessions}, LLM {p.delay:.0f}s: {error}")


def find(phases: list[Phase], sessions: int, delay: float) -> Phase | None:
    return next((p for p in phases if p.sessions == sessions and p.delay == delay), None)


def print_targets(phases: list[Phase], rss_start: float) -> None:
    rows = []
    alone = find(phases, 1, 0) or (phases[0] if phases else None)
    if alone:
        rows.append(
            ("reset overhead, 1 session, p50", pct(alone.reset, 50) - alone.delay, 0.050, "0.6 s")
        )
        rows.append(("DB tool call alone, p50", pct(alone.tool, 50), 0.002, "16 ms"))
    storm = max(phases, key=lambda p: p.sessions) if phases else None
    for p in sorted({(p.sessions, p.delay) for p in phases}):
        phase = find(phases, *p)
        if phase.sessions >= 64:
            rows.append(
                (
                    f"reset overhead, {phase.sessions} at once (LLM {phase.delay:.0f}s), p50",
                    pct(phase.reset, 50) - phase.delay,
                    0.050,
                    "66 s p50 at 64" if phase.sessions == 64 else "—",
                )
            )
    busy = find(phases, 64, 1)
    if busy:
        rows.append(("1 s LLM turn at 64 sessions, p50", pct(busy.respond, 50), 1.05, "5.3 s"))
        rows.append(("DB tool call while 64 wait on LLM, p95", pct(busy.probe, 95), 0.050, "6 s"))
    if storm:
        for delay in sorted({p.delay for p in phases if p.sessions == storm.sessions}):
            phase = find(phases, storm.sessions, delay)
            rows.append(
                (
                    f"errors at {phase.sessions} sessions{', one key' if ONE_KEY else ''}"
                    f" (LLM {delay:.0f}s)",
                    float(len(phase.errors)),
                    0.0,
                    "1/3 of 128 dropped",
                )
            )
    for phase in phases:
        if phase.sessions == storm.sessions:
            rows.append(
                (
                    f"RSS per open session at {phase.sessions} (LLM {phase.delay:.0f}s), MiB",
                    phase.rss_per_session,
                    10.0,
                    "~50 MiB, never given back",
                )
            )
    if storm:
        # An upper bound: all growth since start (incl. allocator arenas kept after
        # scoring and idle pool threads) charged to the largest session count.
        peak = max(p.rss_open for p in phases)
        rows.append(
            (
                f"RSS growth since start / {storm.sessions} sessions (upper bound), MiB",
                (peak - rss_start) / storm.sessions,
                10.0,
                "~50 MiB",
            )
        )
    print()
    print(f"{'target':<58} {'measured':>10} {'target':>8} {'ratio':>6}  original Space")
    for name, value, target, original in rows:
        is_mib = "MiB" in name
        is_count = name.startswith("errors")
        shown = (
            f"{value:.0f}" if is_count else f"{value:.2f}" if is_mib else f"{value * 1000:.1f} ms"
        )
        goal = (
            f"{target:.0f}"
            if is_count
            else f"{target:.0f}"
            if is_mib
            else (f"{target * 1000:.0f} ms")
        )
        ratio = (
            "ok" if is_count and value == 0 else ("FAIL" if is_count else f"{value / target:.2f}")
        )
        print(f"{name:<58} {shown:>10} {goal:>8} {ratio:>6}  {original}")


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,8,64,256")
    parser.add_argument("--delays", default="0,1")
    parser.add_argument("--scored", type=int, default=8, help="sessions per phase that call done")
    parser.add_argument("--app", default="tau2site.asgi:application")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="OpenEnv processes; more than 1: behind tau2_env.gate.session_router",
    )
    parser.add_argument(
        "--keys", action="store_true", help="play with studio API keys: episodes recorded as runs"
    )
    parser.add_argument(
        "--one-key",
        action="store_true",
        help="every session on one studio key with its own cap (one LLM delay)",
    )
    args = parser.parse_args()
    counts = [int(x) for x in args.sessions.split(",") if x.strip()]
    delays = [float(x) for x in args.delays.split(",") if x.strip()]
    max_envs = max(64, max(counts) + 1)  # +1: the probe session

    llm = harness.LLMProcess("bench.openenv_load:token_delays")
    try:
        with tempfile.TemporaryDirectory(prefix="tau2-bench-") as var_dir:
            env = harness.openenv_environment(llm.base_url, max_envs, var_dir)
            if args.one_key:
                if args.keys or len(delays) != 1:
                    parser.error("--one-key takes one --delays value, and not --keys")
                env["TAU2_SESSIONS_PER_KEY_MAX"] = str(max_envs)
                token = f"hf_bench_{int(delays[0] * 1000)}_trainer"
                ONE_KEY.append(make_one_key(env, token, max_envs))
            if args.keys:
                plan = [(1, 0.0)] + [(n, delay) for delay in delays for n in counts]
                tokens = [
                    token
                    for serial, (n, delay) in enumerate(plan)
                    for probe, others in [phase_tokens(n, delay, serial)]
                    for token in [probe, *others]
                ]
                KEYS.update(make_keys(env, tokens))
            if args.processes > 1:
                server = harness.start_router(env, processes=args.processes, app=args.app)
            else:
                server = harness.start_openenv(env, app=args.app)
            try:
                measure(
                    server,
                    env,
                    app=args.app,
                    max_envs=max_envs,
                    processes=args.processes,
                    counts=counts,
                    delays=delays,
                    scored=args.scored,
                )
            finally:
                stop(server)
    finally:
        llm.stop()


def measure(
    server: Process,
    env: dict[str, str],
    *,
    app: str,
    max_envs: int,
    processes: int = 1,
    counts: list[int],
    delays: list[float],
    scored: int,
) -> None:
    """Warm up, run every phase, print the table and the targets."""
    url = server.ws_url("/ws")
    print(
        f"server {app} pid {server.pid} ({processes} process"
        f"{'es behind tau2_env.gate.session_router' if processes > 1 else ''}), "
        f"MAX_CONCURRENT_ENVS={max_envs}, "
        f"{'studio keys: episodes recorded' if KEYS else ''}"
        f"{f'one studio key holding {max_envs} sessions: episodes recorded' if ONE_KEY else ''}"
        f"{'' if KEYS or ONE_KEY else 'no keys'}; "
        f"RSS at start {rss_mib(server.pid):.0f} MiB; "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    rss_start = rss_mib(server.pid)
    # Warm-up: the first session of a domain validates its database once, in each process
    # (sessions opened together land on different processes behind the router).
    asyncio.run(run_phase(url, server.pid, 2 * processes, 0.0, 2 * processes, serial=0))
    phases = []
    for delay in delays:
        for n in counts:
            phase = asyncio.run(
                asyncio.wait_for(
                    run_phase(url, server.pid, n, delay, scored, serial=len(phases) + 1),
                    PHASE_TIMEOUT_S,
                )
            )
            phases.append(phase)
            print(
                f"  N={n} LLM {delay:.0f}s: {phase.seconds:.0f}s, {len(phase.errors)} errors",
                flush=True,
            )
    print()
    print_table(phases)
    print_targets(phases, rss_start)
    if KEYS or ONE_KEY:
        stop(server)
        print_recorded(env)


if __name__ == "__main__":
    main()

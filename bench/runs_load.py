"""Load on model runs: Celery workers, channels_redis and the live page's WebSocket.

Run by hand: ``.venv/bin/python bench/runs_load.py [--runs 20,100] [--workers 1,2]
[--delay 1.0] [--concurrency N]``. Everything listens on 127.0.0.1 only.

It sets up, all of its own:

* PostgreSQL: by default a private cluster (``initdb`` in a temporary directory, on a
  free port, ``max_connections=500``), because 100 concurrent runs hold about 100
  connections from the workers alone and the shared server allows 100 for everyone;
  ``--database-url`` uses an existing server instead (the database is created if missing).
  Then ``migrate`` and ``load_tasks airline``.
* Redis: ``--redis-url`` (default ``redis://127.0.0.1:6379/11``), its own ``CELERY_QUEUE``
  and ``CHANNELS_PREFIX``.
* The scripted LLM (``tests.support.llm_server``) in a child process, answering every
  call after ``--delay`` seconds and solving airline task 27 like ``gold_script``: the
  customer opens, the agent calls ``get_user_details`` then ``send_certificate`` then
  answers, the customer stops. Stateless; it counts the calls per bearer token, and each
  run has its own person and token, so every run's LLM time is known exactly.
* uvicorn serving ``tau2site.asgi:application`` in a subprocess, and 1 or 2
  ``celery -A tau2site worker --pool threads --concurrency N`` processes (N defaults to
  the largest run count divided by the worker count: a run holds a worker thread for
  its whole conversation, so 100 concurrent runs need 100 threads in all).

For each (runs, workers) pair it creates one person per run (token in the vault, a
Django session), starts the runs with ``run_create`` one after the other, and opens one
WebSocket per run as soon as it exists (``/ws/runs/<id>/``, session cookie, Origin =
the server). It measures:

* runs per minute: completed runs / (first ``run_create`` → last final status seen by a
  browser);
* event latency worker → browser (p50/p95) over live events (those after the socket's
  first status message; earlier ones are history replayed on connect): from the
  ``RunEvent`` row's ``created_at`` (set by the worker just before its transaction
  commits), and from the τ² message's own ``timestamp`` (when the worker made it);
  the browser's clock is ``time.time()`` on receipt, on the same machine;
* the platform's share of run time: (run duration − LLM calls × delay) / run duration,
  per run, for the worker's part (``started_at`` → ``finished_at``) and end to end
  (``run_create`` → final status in the browser, which includes the queue);
* errors: runs not completed with reward 1.0, and socket errors.

The baseline is the ideal: every run's LLM calls back to back (calls × delay, 5 s at
1 s) with all runs at once, so ideal runs/min = runs / that time. Anything above it is
the platform's (Celery, Django, PostgreSQL, Redis, the consumer) and τ²'s own CPU time
(orchestrator, litellm, the evaluator), on a machine shared with whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASK = ("airline", "27")
AGENT_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash:novita"
NAME = "tau2-bench-runs"
DB_NAME = "tau2_bench_runs"
START_TIMEOUT_S = 90.0
CONFIG_TIMEOUT_S = 300.0  # per (runs, workers) pair
SAMPLE_INTERVAL_S = 0.5
MAX_CONNECTIONS = 20  # per run and browser


# ------------------------------------------------------------------ the scripted LLM


def serve_llm(delay: float) -> None:
    """Child process: the scripted LLM. Prints its port, then answers ``stats`` lines on
    stdin with the calls per token as JSON; exits when stdin closes."""
    sys.path.insert(0, str(ROOT))
    from tests.support.llm_server import ScriptedLLM
    from tests.support.scripts import gold_script

    calls: dict[str, int] = {}
    lock = threading.Lock()
    llm = ScriptedLLM()
    gold_script(llm, delay=delay)  # solves airline/27; stateless, so any worker may ask
    solve = llm.responder

    def responder(request):
        with lock:
            calls[request.token or ""] = calls.get(request.token or "", 0) + 1
        return solve(request)

    llm.responder = responder
    llm.start()
    llm.requests = _Discard()  # the server records every request; do not grow unbounded
    print(llm.port, flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            with lock:
                snapshot = dict(calls)
            print(json.dumps(snapshot), flush=True)
    llm.stop()


class _Discard(list):
    def append(self, item) -> None:  # noqa: ANN001
        return None


class LLMProcess:
    def __init__(self, delay: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--serve-llm", str(delay)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.port = int(self.proc.stdout.readline())
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._lock = threading.Lock()

    def calls(self) -> dict[str, int]:
        with self._lock:
            self.proc.stdin.write("stats\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            _wait_or_kill(self.proc)


# ------------------------------------------------------------------ services


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_or_kill(proc: subprocess.Popen, timeout: float = 20) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def _terminate(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        _wait_or_kill(proc)


class PrivatePostgres:
    """A throwaway PostgreSQL cluster on a free port (run as ``postgres`` when root)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tau2-bench-pg-")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, user="postgres", group="postgres")

    def start(self) -> str:
        data = os.path.join(self.dir, "data")
        subprocess.run(
            [*self._as, _pg_bin("initdb"), "-D", data, "-U", "postgres", "-A", "trust"]
            + ["--no-sync", "-E", "UTF8"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.proc = subprocess.Popen(
            [*self._as, _pg_bin("postgres"), "-D", data, "-p", str(self.port)]
            + ["-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.dir}"]
            + ["-c", "max_connections=500", "-c", "shared_buffers=128MB"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while subprocess.run(
            [_pg_bin("pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
        ).returncode:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the private PostgreSQL did not start")
            time.sleep(0.2)
        return f"postgres://postgres@127.0.0.1:{self.port}/{DB_NAME}"

    def stop(self) -> None:
        _terminate(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    if not versions:
        raise SystemExit(f"{name} not found: install PostgreSQL or pass --database-url")
    return str(versions[-1])


def ensure_database(url: str) -> None:
    import psycopg

    admin = url.rsplit("/", 1)[0] + "/postgres"
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def environment(*, database_url: str, redis_url: str, llm_url: str) -> dict[str, str]:
    """The production path's settings for every process of the bench."""
    from cryptography.fernet import Fernet

    env = dict(os.environ)
    for name in (
        "DJANGO_ALLOW_ASYNC_UNSAFE",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "TAU2_USER_PROVIDER",
    ):
        env.pop(name, None)
    env.update(
        DJANGO_SETTINGS_MODULE="tau2site.settings",
        DEBUG="false",
        DJANGO_SECRET_KEY="bench-only-" + "x" * 50,
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        CELERY_QUEUE=NAME,
        CHANNELS_PREFIX=NAME,
        ALLOWED_HOSTS="127.0.0.1,localhost,testserver",
        CSRF_TRUSTED_ORIGINS="http://127.0.0.1",
        SECURE_SSL_REDIRECT="false",
        SESSION_COOKIE_SECURE="false",
        CSRF_COOKIE_SECURE="false",
        SECURE_HSTS_SECONDS="0",
        TAU2_DOMAIN="airline",
        TAU2_SPLIT="test",
        TAU2_VAULT_KEYS=os.environ.get("TAU2_VAULT_KEYS") or Fernet.generate_key().decode(),
        TAU2_EMBEDDED_WORKER="false",
        TAU2_HF_ROUTER_URL=llm_url,
        OPENAI_BASE_URL=llm_url,
        TAU2_LLM_TIMEOUT="60",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(ROOT),
    )
    return env


def manage(env: dict[str, str], *args: str) -> None:
    command = [sys.executable, "manage.py", *args]
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tau2site.asgi:application"]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        + ["--ws", "websockets-sansio", "--backlog", "2048"],
        cwd=ROOT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            pass
        if time.monotonic() > deadline:
            _terminate(proc)
            raise SystemExit("the server did not start")
        time.sleep(0.2)


def start_workers(env: dict[str, str], *, count: int, concurrency: int) -> list[subprocess.Popen]:
    from tau2site.celery import app

    procs, names = [], []
    for index in range(count):
        name = f"bench-runs-{index}-{os.getpid()}@localhost"
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tau2site", "worker"]
                + ["--pool", "threads", "--concurrency", str(concurrency)]
                + ["--loglevel", "WARNING", "--without-gossip", "--without-mingle"]
                + ["-Q", NAME, "-n", name],
                cwd=ROOT,
                env=env,
            )
        )
        names.append(name)
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(app.control.ping(destination=names, timeout=0.5)) < count:
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            for proc in procs:
                _terminate(proc)
            raise SystemExit("the Celery workers did not start")
    return procs


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ one configuration


@dataclass
class Person:
    user_id: int
    token: str
    cookie: str


@dataclass
class Watch:
    """What one browser saw of one run."""

    run_id: int
    created_at: float  # time.time() when run_create returned
    events: list[tuple[int, float, bool]] = field(default_factory=list)  # seq, at, live
    final_at: float | None = None
    status: str = ""
    error: str = ""
    reconnects: int = 0
    drops: list[str] = field(default_factory=list)


@dataclass
class Result:
    runs: int
    workers: int
    concurrency: int
    wall_s: float
    completed: int
    errors: list[str]
    ideal_s: float
    row_latency: list[float]
    msg_latency: list[float]
    to_layer: list[float]
    layer_to_browser: list[float]
    backlog_events: int
    share_worker: list[float]
    share_e2e: list[float]
    queue_wait: list[float]
    scoring: list[float]
    llm_calls: list[int]
    cpu: dict[str, float]
    peak_db_connections: int
    load: tuple[float, float]
    reconnects: int
    drops: dict[str, int]

    @property
    def runs_per_min(self) -> float:
        return self.completed / self.wall_s * 60 if self.wall_s else 0.0

    @property
    def ideal_runs_per_min(self) -> float:
        return self.runs / self.ideal_s * 60


def make_people(tag: str, count: int) -> list[Person]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from apps.accounts.services import credential_store

    people = []
    for index in range(count):
        token = f"hf_bench_{tag}_{index:03d}_0123456789"
        user = get_user_model().objects.create_user(username=f"bench-{tag}-{index:03d}")
        credential_store(
            user=user,
            token_response={
                "access_token": token,
                "refresh_token": f"{token}_refresh",
                "expires_in": 28800,
                "scope": "openid profile inference-api",
            },
        )
        client = Client()
        client.force_login(user)
        people.append(Person(user.pk, token, f"sessionid={client.cookies['sessionid'].value}"))
    return people


def create_run(user_id: int, prices) -> int:
    from django.contrib.auth import get_user_model

    from apps.runs.services import run_create
    from apps.tasks.models import Task

    task = Task.objects.get(domain_id=TASK[0], task_id=TASK[1])
    run = run_create(
        user=get_user_model().objects.get(pk=user_id),
        task=task,
        agent_model=AGENT_MODEL,
        user_model="deepseek-ai/DeepSeek-V4.1-Flash",
        max_steps=30,
        seed=7,
        agent_prices=prices,
    )
    return run.pk


async def watch_run(watch: Watch, *, server: str, cookie: str, deadline: float) -> None:
    """Follow one run as ``static/js/run.js`` does: on a drop, reconnect after
    250 ms × 2^retry with ``?after=<last seq>``; stop at the final status."""
    from websockets.asyncio.client import connect

    base = server.replace("http://", "ws://", 1) + f"/ws/runs/{watch.run_id}/?after="
    last_seq, first_status_seen, retry = -1, False, 0
    for attempt in range(MAX_CONNECTIONS):
        if attempt:
            watch.reconnects += 1
            retry = min(retry + 1, 6)
            await asyncio.sleep(0.25 * 2**retry)
        try:
            async with connect(
                base + str(last_seq),
                additional_headers={"Cookie": cookie, "Origin": server},
                open_timeout=60,
                max_size=None,
            ) as ws:
                retry = 0
                for _ in range(1000):  # a run here has ~12 events and a dozen status lines
                    left = deadline - time.monotonic()
                    if left <= 0:
                        watch.error = "timed out"
                        return
                    data = json.loads(await asyncio.wait_for(ws.recv(), timeout=left))
                    at = time.time()
                    if data["type"] == "event" and data["seq"] > last_seq:
                        last_seq = data["seq"]
                        # Before the first status line: history replayed on first connect.
                        watch.events.append((data["seq"], at, first_status_seen))
                    elif data["type"] == "status":
                        first_status_seen = True
                        if data["final"]:
                            watch.final_at, watch.status = at, data["status"]
                            return
        except TimeoutError:
            if time.monotonic() >= deadline:
                watch.error = "timed out"
                return
        except Exception as exc:  # noqa: BLE001 - a drop: reconnect as the page does
            watch.drops.append(f"{type(exc).__name__}: {exc}"[:100])
    watch.error = f"gave up after {MAX_CONNECTIONS} connections"


class GroupListener:
    """A channel of the bench's own in every run's group: when each ``run.event`` left
    the worker through Redis, to split the latency into worker → layer → browser."""

    def __init__(self) -> None:
        from channels.layers import get_channel_layer

        self.layer = get_channel_layer()
        self.seen: dict[tuple[int, int], float] = {}
        self.errors = 0
        self.channel = ""
        self._stop = False

    async def start(self) -> None:
        self.channel = await self.layer.new_channel()

    async def add(self, run_id: int) -> None:
        from apps.runs.events import group_name

        await self.layer.group_add(group_name(run_id), self.channel)

    async def listen(self, deadline: float) -> None:
        for _ in range(100_000):
            if self._stop or time.monotonic() > deadline:
                return
            try:
                message = await asyncio.wait_for(self.layer.receive(self.channel), timeout=1)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - redis-py's 5 s read timeout when idle
                self.errors += 1
                continue
            if message.get("type") == "run.event":
                self.seen.setdefault((message["run_id"], message["seq"]), time.time())

    def stop(self) -> None:
        self._stop = True


def db_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


async def run_config(
    *,
    runs: int,
    workers: int,
    concurrency: int,
    delay: float,
    server: str,
    llm: LLMProcess,
    pids: dict[str, list[int]],
    timeout: float,
) -> Result:
    from apps.inference.selectors import offer_price

    tag = f"w{workers}r{runs}"
    people = await asyncio.to_thread(make_people, tag, runs)
    prices = await asyncio.to_thread(
        offer_price, model_id=AGENT_MODEL.split(":")[0], provider=AGENT_MODEL.split(":")[1]
    )
    cpu_before = {name: sum(cpu_seconds(p) for p in ps) for name, ps in pids.items()}
    load_before = os.getloadavg()[0]
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        for _ in range(int(timeout / SAMPLE_INTERVAL_S) + 1):
            if not sampling:
                return
            peak = max(peak, await asyncio.to_thread(db_connections))
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    sampler = asyncio.create_task(sample())
    listener = GroupListener()
    await listener.start()
    listening = asyncio.create_task(listener.listen(time.monotonic() + timeout))
    deadline = time.monotonic() + timeout
    started = time.time()
    watches, tasks = [], []
    # One creator thread: Django's connection is per thread, so runs are created on one.
    loop = asyncio.get_running_loop()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as creator:
        for person in people:
            run_id = await loop.run_in_executor(creator, create_run, person.user_id, prices)
            watch = Watch(run_id=run_id, created_at=time.time())
            watches.append(watch)
            await listener.add(run_id)
            tasks.append(
                asyncio.create_task(
                    watch_run(watch, server=server, cookie=person.cookie, deadline=deadline)
                )
            )
        await asyncio.gather(*tasks)
        sampling = False
        await sampler
        listener.stop()
        await listening
        cpu_after = {name: sum(cpu_seconds(p) for p in ps) for name, ps in pids.items()}
        calls = await asyncio.to_thread(llm.calls)
        return await loop.run_in_executor(
            creator,
            _result,
            dict(
                runs=runs,
                workers=workers,
                concurrency=concurrency,
                delay=delay,
                started=started,
                watches=watches,
                people=people,
                calls=calls,
                cpu={k: cpu_after[k] - cpu_before[k] for k in cpu_after},
                peak=peak,
                layer_seen=listener.seen,
                load=(load_before, os.getloadavg()[0]),
            ),
        )


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()  # τ²'s naive local time


def _result(a: dict) -> Result:
    from apps.runs.models import Run, RunEvent

    watches: list[Watch] = a["watches"]
    delay: float = a["delay"]
    by_id = {w.run_id: w for w in watches}
    rows = {
        (e.run_id, e.seq): e
        for e in RunEvent.objects.filter(run_id__in=by_id).only(
            "run_id", "seq", "created_at", "message"
        )
    }
    row_latency, msg_latency, backlog = [], [], 0
    to_layer, layer_to_browser = [], []
    for w in watches:
        for seq, at, live in w.events:
            if not live:
                backlog += 1
                continue
            event = rows.get((w.run_id, seq))
            if event is None:
                continue
            row_latency.append(at - event.created_at.timestamp())
            layer_at = a["layer_seen"].get((w.run_id, seq))
            if layer_at is not None:
                to_layer.append(layer_at - event.created_at.timestamp())
                layer_to_browser.append(at - layer_at)
            if event.message.get("timestamp"):
                msg_latency.append(at - _ts(event.message["timestamp"]))
    errors, share_worker, share_e2e, queue_wait, scoring, llm_calls = [], [], [], [], [], []
    last_event = {}
    for (run_id, _seq), event in rows.items():
        last_event[run_id] = max(last_event.get(run_id, 0.0), event.created_at.timestamp())
    runs = Run.objects.filter(pk__in=by_id).select_related("created_by")
    completed = 0
    tokens = {p.user_id: p.token for p in a["people"]}
    for run in runs:
        w = by_id[run.pk]
        n = a["calls"].get(tokens[run.created_by_id], 0)
        llm_calls.append(n)
        ok = run.status == Run.Status.COMPLETED and run.reward == 1.0 and not w.error
        if ok:
            completed += 1
        else:
            errors.append(
                f"run {run.pk}: {run.status} reward={run.reward} "
                f"{(run.error or w.error)[:120]}".rstrip()
            )
        if run.started_at and run.finished_at:
            worked = (run.finished_at - run.started_at).total_seconds()
            share_worker.append((worked - n * delay) / worked)
            queue_wait.append((run.started_at - run.created_at).total_seconds())
            if run.pk in last_event:
                scoring.append(run.finished_at.timestamp() - last_event[run.pk])
        if w.final_at:
            total = w.final_at - w.created_at
            share_e2e.append((total - n * delay) / total)
    finals = [w.final_at for w in watches if w.final_at]
    wall = (max(finals) - a["started"]) if finals else 0.0
    per_run = statistics.median(llm_calls) if llm_calls else 5
    return Result(
        runs=a["runs"],
        workers=a["workers"],
        concurrency=a["concurrency"],
        wall_s=wall,
        completed=completed,
        errors=errors,
        ideal_s=per_run * delay,
        row_latency=row_latency,
        msg_latency=msg_latency,
        to_layer=to_layer,
        layer_to_browser=layer_to_browser,
        backlog_events=backlog,
        share_worker=share_worker,
        share_e2e=share_e2e,
        queue_wait=queue_wait,
        scoring=scoring,
        llm_calls=llm_calls,
        cpu=a["cpu"],
        peak_db_connections=a["peak"],
        load=a["load"],
        reconnects=sum(w.reconnects for w in watches),
        drops=dict(Counter(drop for w in watches for drop in w.drops)),
    )


# ------------------------------------------------------------------ report


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value * 1000:.0f}"


def report(results: list[Result], delay: float) -> None:
    print()
    print(f"τ² model runs under load — scripted LLM answering after {delay:g} s, airline/27")
    header = (
        f"{'runs':>4} {'workers×thr':>11} {'wall s':>7} {'runs/min':>8} {'ideal':>6} "
        f"{'ratio':>5} {'evt p50':>7} {'evt p95':>7} {'msg p95':>7} "
        f"{'platform':>8} {'e2e':>5} {'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.runs:>4} {f'{r.workers}×{r.concurrency}':>11} {r.wall_s:>7.1f} "
            f"{r.runs_per_min:>8.1f} {r.ideal_runs_per_min:>6.0f} "
            f"{r.runs_per_min / r.ideal_runs_per_min:>5.2f} "
            f"{ms(pct(r.row_latency, 50)):>7} {ms(pct(r.row_latency, 95)):>7} "
            f"{ms(pct(r.msg_latency, 95)):>7} "
            f"{pct(r.share_worker, 50):>8.0%} {pct(r.share_e2e, 50):>5.0%} "
            f"{r.runs - r.completed:>6}"
        )
    print()
    print(
        "wall: first run_create → last final status in a browser. ideal: runs/min if every\n"
        "run took only its LLM calls back to back (calls × delay), all at once; ratio =\n"
        "runs/min ÷ ideal. evt p50/p95 (ms): RunEvent row created by the worker → the\n"
        "browser received it; msg p95: τ² message made → received. platform: median share\n"
        "of a run's worker time (started → finished) not spent waiting on the LLM; e2e: the\n"
        "same from run_create to the browser's final status (includes the queue).\n"
    )
    for r in results:
        cpu = ", ".join(f"{k} {v:.1f} s ({v / r.runs:.2f}/run)" for k, v in r.cpu.items())
        print(
            f"[{r.runs} runs, {r.workers} worker(s) × {r.concurrency} threads] "
            f"LLM calls/run {min(r.llm_calls, default=0)}–{max(r.llm_calls, default=0)}; "
            f"live events {len(r.row_latency)}, replayed on connect {r.backlog_events}; "
            f"queue wait p50 {pct(r.queue_wait, 50):.2f} s "
            f"max {max(r.queue_wait, default=0):.2f} s; "
            f"scoring (last event → finished) p50 {pct(r.scoring, 50):.2f} s "
            f"p95 {pct(r.scoring, 95):.2f} s; platform share p95 {pct(r.share_worker, 95):.0%}; "
            f"CPU {cpu}; peak PostgreSQL connections {r.peak_db_connections}; "
            f"load average {r.load[0]:.1f} → {r.load[1]:.1f}; "
            f"socket drops (the page reconnects) {r.reconnects}; "
            f"latency split p50/p95 ms: row → channel layer (a listener of the bench) "
            f"{ms(pct(r.to_layer, 50))}/{ms(pct(r.to_layer, 95))}, "
            f"layer → browser {ms(pct(r.layer_to_browser, 50))}/"
            f"{ms(pct(r.layer_to_browser, 95))}"
        )
        for reason, count in sorted(r.drops.items(), key=lambda item: -item[1])[:3]:
            print(f"    drop ×{count}: {reason}")
        for line in r.errors[:5]:
            print(f"    {line}")
        if len(r.errors) > 5:
            print(f"    … and {len(r.errors) - 5} more")


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="20,100", help="comma-separated run counts")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--delay", type=float, default=1.0, help="LLM answer delay, seconds")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=0,
        help="threads per worker (default: the largest run count ÷ workers)",
    )
    parser.add_argument("--database-url", default="", help="default: a private cluster")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--timeout", type=float, default=CONFIG_TIMEOUT_S)
    parser.add_argument("--serve-llm", type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_llm is not None:
        return serve_llm(args.serve_llm)
    run_counts = [int(n) for n in args.runs.split(",")]
    worker_counts = [int(n) for n in args.workers.split(",")]
    for url in (args.database_url, args.redis_url):
        host = url.split("@")[-1].split("//")[-1].split(":")[0].split("/")[0]
        if url and host not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"only 127.0.0.1: {url}")

    postgres = llm = server = None
    workers: list[subprocess.Popen] = []
    try:
        if args.database_url:
            database_url = args.database_url
        else:
            postgres = PrivatePostgres()
            database_url = postgres.start()
        ensure_database(database_url)
        llm = LLMProcess(args.delay)
        env = environment(database_url=database_url, redis_url=args.redis_url, llm_url=llm.base_url)
        os.environ.clear()
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        print("migrate, load_tasks airline …", flush=True)
        manage(env, "migrate", "--noinput")
        manage(env, "load_tasks", "airline")
        import django

        django.setup()
        logging.disable(logging.INFO)
        _prepare()
        server, url = start_server(env)
        results = []
        for count in worker_counts:
            concurrency = args.concurrency or math.ceil(max(run_counts) / count)
            workers = start_workers(env, count=count, concurrency=concurrency)
            pids = {"workers": [p.pid for p in workers], "uvicorn": [server.pid]}
            for runs in run_counts:
                print(f"{runs} runs on {count} worker(s) × {concurrency} threads …", flush=True)
                result = asyncio.run(
                    run_config(
                        runs=runs,
                        workers=count,
                        concurrency=concurrency,
                        delay=args.delay,
                        server=url,
                        llm=llm,
                        pids=pids,
                        timeout=args.timeout,
                    )
                )
                results.append(result)
            for proc in workers:
                _terminate(proc)
            workers = []
        report(results, args.delay)
    finally:
        for proc in workers:
            _terminate(proc)
        _terminate(server)
        if llm is not None:
            llm.stop()
        if postgres is not None:
            postgres.stop()


def _prepare() -> None:
    """Empty the bench's queue, channel groups and earlier bench rows; refresh the
    Inference catalogue from the scripted router."""
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from apps.inference.services import catalogue_refresh
    from apps.runs.models import Run

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"{NAME}*", count=1000):
        client.delete(key)
    client.delete(NAME)
    Run.objects.filter(created_by__username__startswith="bench-").delete()
    get_user_model().objects.filter(username__startswith="bench-").delete()
    report = catalogue_refresh()
    if report.source != "router":
        raise SystemExit(f"the scripted router's catalogue was not read: {report.summary()}")


if __name__ == "__main__":
    main()

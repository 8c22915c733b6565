"""What the benchmarks share: their processes and the report's numbers.

Each ``bench/<name>.py`` keeps its own measurement and report; what it starts comes from
here, on 127.0.0.1 only:

* :class:`LLMProcess`: the scripted LLM (``tests.support.llm_server``) in a child process,
  answering as a *script* says (a ``"module:function"`` that sets the server's responder,
  e.g. ``tests.support.scripts:gold_script``), counting the calls per bearer token;
* :func:`production_stack`: the production path, all of the bench's own — a private
  PostgreSQL cluster (:class:`PrivatePostgres`) or ``--database-url``, a Redis database
  with the bench's own queue and channel prefix (:data:`NAME`), the scripted LLM, migrated
  and loaded, uvicorn, and Celery workers on demand (:meth:`Stack.start_workers`);
* :func:`openenv_environment` and :func:`start_openenv`: the OpenEnv server as
  ``openenv_load`` and ``golden_ws`` serve it (SQLite in a temporary folder, no Redis);
* :func:`make_people`, :class:`Watch` and :func:`watch_run`: people signed in with a token
  in the vault, and a browser following a run's live page as ``static/js/run.js`` does;
* :func:`percentile` (nearest rank), :func:`percentile_rounded` (the element at the
  rounded index) and :func:`ms`: the two percentile definitions the reports have always
  used, kept apart so that every printed number means what it meant.

The web servers and workers are ``tests.support.processes``'s :class:`Process`, waited
for and stopped with its ``wait_until_up`` and ``stop``.
"""

from __future__ import annotations

import asyncio
import http.server
import importlib
import json
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.fernet import Fernet
from websockets.asyncio.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as ``python bench/<name>.py``: tests.support, apps
    sys.path.insert(0, str(ROOT))

from tests.support.llm_server import ScriptedLLM  # noqa: E402 - after the path
from tests.support.processes import (  # noqa: E402
    Process,
    free_port,
    start_worker,
    stop,
    wait_until_up,
)

ASGI_APP = "tau2site.asgi:application"
# Models the scripted router's catalogue offers (tests.support.llm_server.DEFAULT_CATALOGUE).
AGENT_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash:novita"
USER_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"
NAME = "tau2-bench-runs"  # the production stack's Celery queue and channel prefix
DB_NAME = "tau2_bench_runs"  # its database, in the private cluster
START_TIMEOUT_S = 90.0
MAX_CONNECTIONS = 20  # per run and browser
_CREDENTIALS = ("HF_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TAU2_USER_PROVIDER")


# ------------------------------------------------------------------ processes


def _wait_or_kill(proc: subprocess.Popen, timeout: float = 20) -> None:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def require_local(*urls: str) -> None:
    """Exit unless every non-empty URL is on 127.0.0.1 or localhost."""
    for url in urls:
        host = url.split("@")[-1].split("//")[-1].split(":")[0].split("/")[0]
        if url and host not in ("127.0.0.1", "localhost"):
            raise SystemExit(f"only 127.0.0.1: {url}")


def manage(
    env: dict[str, str], *args: str, input: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` in ``env``; its output is captured (shown when it fails)."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        check=False,
    )
    if check and done.returncode:
        raise SystemExit(f"manage.py {args[0]} failed:\n{done.stderr[-3000:]}")
    return done


def start_web(
    env: dict[str, str],
    *,
    app: str = ASGI_APP,
    ws: str | None = "websockets-sansio",
    backlog: int = 2048,
    timeout: float = START_TIMEOUT_S,
) -> Process:
    """uvicorn serving ``app`` on a free port, up (``/health`` answers) when it returns.
    ``ws=None`` leaves uvicorn's own choice of WebSocket implementation."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port)]
        + ["--log-level", "warning", "--backlog", str(backlog)]
        + (["--ws", ws] if ws else []),
        cwd=ROOT,
        env=env,
    )
    web = Process(proc=proc, url=f"http://127.0.0.1:{port}")
    _up(web, timeout=timeout)
    return web


def _up(*processes: Process, timeout: float = START_TIMEOUT_S) -> None:
    try:
        wait_until_up(*processes, timeout=timeout)
    except RuntimeError as exc:
        for process in processes:
            stop(process)
        raise SystemExit(f"did not start: {exc}") from exc


# ------------------------------------------------------------------ the scripted LLM


class _Discard(list):
    """The server records every request; a long benchmark must not grow it unbounded."""

    def append(self, item) -> None:  # noqa: ANN001
        return None


def serve_llm(script: str, delay: float) -> None:
    """The child process of :class:`LLMProcess`: the scripted LLM answering as ``script``
    says. Prints its port, answers ``stats`` lines on stdin with the calls per token as
    JSON; exits when stdin closes. Its listen backlog is 4096, not http.server's 5: 256
    sessions call at once, and a full backlog makes the kernel retry a connection after
    1 s — the scripted LLM's delay, not the server's."""
    http.server.ThreadingHTTPServer.request_queue_size = 4096  # this child process only
    module, name = script.split(":")
    llm = ScriptedLLM()
    getattr(importlib.import_module(module), name)(llm, delay=delay)
    answer = llm.responder
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def counted(request):
        with lock:
            calls[request.token or ""] += 1
        return answer(request)

    llm.responder = counted
    llm.start()
    llm.requests = _Discard()
    print(llm.port, flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            with lock:
                snapshot = dict(calls)
            print(json.dumps(snapshot), flush=True)
    llm.stop()


# ``-c``, not ``-m bench.harness``: the script's module may import this one, and as
# ``__main__`` it would be a second copy.
_SERVE_LLM = (
    "import sys; from bench.harness import serve_llm; serve_llm(sys.argv[1], float(sys.argv[2]))"
)


class LLMProcess:
    """The scripted LLM in a process of its own (its threads do not share this
    process's CPU and GIL). ``script`` is ``"module:function"``: a function
    ``(llm: ScriptedLLM, *, delay: float)`` that sets ``llm.responder``; it must be
    stateless across requests, as any worker may ask."""

    def __init__(self, script: str, delay: float = 0.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVE_LLM, script, str(delay)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if not line.strip():
            raise SystemExit(f"the scripted LLM ({script}) did not start")
        self.port = int(line)
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._lock = threading.Lock()

    def calls(self) -> dict[str, int]:
        """The chat calls so far, per bearer token."""
        with self._lock:
            self.proc.stdin.write("stats\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            _wait_or_kill(self.proc)


# ------------------------------------------------------------------ the production path


class PrivatePostgres:
    """A throwaway PostgreSQL cluster on a free port (run as ``postgres`` when root):
    ``max_connections=500``, because 100 concurrent runs hold about 100 connections
    from the workers alone and the shared server allows 100 for everyone."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tau2-bench-pg-")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, user="postgres", group="postgres")

    def start(self) -> str:
        """Start the cluster; returns the URL of the bench's database in it."""
        data = os.path.join(self.dir, "data")
        subprocess.run(
            [*self._as, _pg_bin("initdb"), "-D", data, "-U", "postgres", "-A", "trust"]
            + ["--no-sync", "-E", "UTF8"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return self._serve(data)

    def restart(self) -> None:
        """Stop the server as ``pg_ctl restart -m fast`` does (SIGINT: sessions are
        ended, "the database system is shutting down"), then start it on the same data
        and port."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            _wait_or_kill(self.proc)
        self._serve(os.path.join(self.dir, "data"))

    def _serve(self, data: str) -> str:
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
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            _wait_or_kill(self.proc)
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
    """Create the database of ``url`` if its server has none of that name."""
    import psycopg

    admin = url.rsplit("/", 1)[0] + "/postgres"
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def environment(*, database_url: str, redis_url: str, llm_url: str) -> dict[str, str]:
    """The production path's settings for every process of the bench."""
    drop = (*_CREDENTIALS, "DJANGO_ALLOW_ASYNC_UNSAFE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
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
        TAU2_HF_HUB_URL=llm_url.removesuffix("/v1"),
        OPENAI_BASE_URL=llm_url,
        TAU2_LLM_TIMEOUT="60",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(ROOT),
    )
    return env


@dataclass
class Stack:
    """The production path started by :func:`production_stack`."""

    env: dict[str, str]
    llm: LLMProcess
    web: Process
    workers: list[Process] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.web.url

    def start_workers(self, *, count: int, concurrency: int) -> list[Process]:
        """``count`` ``celery worker --pool threads --concurrency N`` processes on the
        bench's queue, answering ``ping`` when it returns."""
        self.workers = [
            start_worker(self.env, queue=NAME, name=f"bench-runs-{index}", concurrency=concurrency)
            for index in range(count)
        ]
        _up(*self.workers)
        return self.workers

    def stop_workers(self) -> None:
        for worker in self.workers:
            stop(worker)
        self.workers = []


@contextmanager
def production_stack(
    *,
    database_url: str,
    redis_url: str,
    script: str,
    delay: float,
    domains: Sequence[str],
    settings: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """Start the production path and set this process up as one of its Django
    processes (``os.environ`` replaced, ``django.setup()``); stop it all on the way out.

    PostgreSQL is a private cluster unless ``database_url`` is given (its database is
    created if missing); then ``migrate`` and ``load_tasks <domains>``. The bench's queue
    and channel groups in Redis, and earlier bench rows (people ``bench-*``), are removed,
    and the Inference catalogue is read from the scripted router. ``settings`` are added
    to every process's environment. No worker is started: :meth:`Stack.start_workers`.
    """
    require_local(database_url, redis_url)
    postgres = llm = web = stack = None
    try:
        if not database_url:
            postgres = PrivatePostgres()
            database_url = postgres.start()
        ensure_database(database_url)
        llm = LLMProcess(script, delay)
        env = environment(database_url=database_url, redis_url=redis_url, llm_url=llm.base_url)
        env.update(settings or {})
        os.environ.clear()
        os.environ.update(env)
        print(f"migrate, load_tasks {' '.join(domains)} …", flush=True)
        manage(env, "migrate", "--noinput")
        manage(env, "load_tasks", *domains)
        import django

        django.setup()
        logging.disable(logging.INFO)
        _prepare()
        web = start_web(env)
        stack = Stack(env=env, llm=llm, web=web)
        yield stack
    finally:
        if stack is not None:
            stack.stop_workers()
        if web is not None:
            stop(web)
        if llm is not None:
            llm.stop()
        if postgres is not None:
            postgres.stop()


def _prepare() -> None:
    """Empty the bench's queue and channel groups, remove earlier bench rows, and refresh
    the Inference catalogue from the scripted router."""
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from apps.evaluations.models import Evaluation
    from apps.inference.services import catalogue_refresh
    from apps.runs.models import Run

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(match=f"{NAME}*", count=1000):  # the queue is NAME itself
        client.delete(key)
    Evaluation.objects.filter(created_by__username__startswith="bench-").delete()
    Run.objects.filter(created_by__username__startswith="bench-").delete()
    get_user_model().objects.filter(username__startswith="bench-").delete()
    report = catalogue_refresh()
    if report.source != "router":
        raise SystemExit(f"the scripted router's catalogue was not read: {report.summary()}")


# ------------------------------------------------------------------ the OpenEnv server


def openenv_environment(llm_url: str, max_envs: int, var_dir: str) -> dict[str, str]:
    """The OpenEnv server's settings: ``DEBUG=true``, SQLite and files in ``var_dir``, no
    ``DATABASE_URL``/``REDIS_URL`` (the channel layer in memory), no embedded worker,
    ``max_envs`` sessions at once, all of them allowed from this one address."""
    drop = (*_CREDENTIALS, "DATABASE_URL", "REDIS_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(
        DEBUG="true",
        TAU2_VAR_DIR=var_dir,
        TAU2_EMBEDDED_WORKER="false",
        TAU2_HF_ROUTER_URL=llm_url,
        # The scripted LLM answers the Hub's whoami too: each bench token is its own account.
        TAU2_HF_HUB_URL=llm_url.removesuffix("/v1"),
        TAU2_DOMAIN="airline",
        TAU2_SPLIT="test",
        TAU2_LLM_TIMEOUT="60",
        MAX_CONCURRENT_ENVS=str(max_envs),
        TAU2_SESSIONS_PER_CLIENT=str(max_envs),
        PYTHONPATH=str(ROOT),
    )
    return env


def start_openenv(env: dict[str, str], *, app: str = ASGI_APP) -> Process:
    """:func:`start_web` as the OpenEnv benchmarks have always served: uvicorn's own
    choice of WebSocket implementation, a backlog of 4096 (256 sessions connect at once)
    and 300 s to start (a loaded 2-core machine imports Django and τ² slowly)."""
    return start_web(env, app=app, ws=None, backlog=4096, timeout=300.0)


def start_router(env: dict[str, str], *, processes: int, app: str = ASGI_APP) -> Process:
    """``python -m tau2_env.gate.session_router``: ``processes`` OpenEnv processes behind one port
    (its children are the uvicorns), up when every one answers ``/health``."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tau2_env.gate.session_router", app, "--processes", str(processes)]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env=env,
    )
    router = Process(proc=proc, url=f"http://127.0.0.1:{port}")
    _up(router, timeout=300.0)
    return router


# ------------------------------------------------------------------ people and browsers


@dataclass
class Person:
    user_id: int
    token: str
    cookie: str


def make_people(tag: str, count: int) -> list[Person]:
    """``count`` people ``bench-<tag>-NNN``, each with their own token in the vault
    (``hf_bench_<tag>_NNN_…``, so the scripted LLM counts their calls apart) and a
    Django session."""
    # Django's test client and pytest: only the benchmarks that set Django up need them.
    from tests.support.people import person, signed_in

    people = []
    for index in range(count):
        token = f"hf_bench_{tag}_{index:03d}_0123456789"
        user = person(f"bench-{tag}-{index:03d}", token)
        client = signed_in(user)
        people.append(Person(user.pk, token, f"sessionid={client.cookies['sessionid'].value}"))
    return people


def page_socket(url: str, *, server: str, cookie: str) -> connect:
    """Open ``url`` as the signed-in page does: its session cookie, Origin = the server
    (an ``async with`` context)."""
    return connect(
        url,
        additional_headers={"Cookie": cookie, "Origin": server},
        open_timeout=60,
        max_size=None,
    )


async def receive(ws: ClientConnection, deadline: float) -> tuple[dict, float] | None:
    """The next JSON message and ``time.time()`` on its receipt; ``None`` once the
    deadline (``time.monotonic()``) has passed. Raises ``TimeoutError`` if none came by
    then."""
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    data = json.loads(await asyncio.wait_for(ws.recv(), timeout=left))
    return data, time.time()


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


async def watch_run(watch: Watch, *, server: str, cookie: str, deadline: float) -> None:
    """Follow one run as ``static/js/run.js`` does: on a drop, reconnect after
    250 ms × 2^retry with ``?after=<last seq>``; stop at the final status. An event is
    live if it came after the socket's first status line (before it: history replayed
    on first connect)."""
    base = server.replace("http://", "ws://", 1) + f"/ws/runs/{watch.run_id}/?after="
    last_seq, first_status_seen, retry = -1, False, 0
    for attempt in range(MAX_CONNECTIONS):
        if attempt:
            watch.reconnects += 1
            retry = min(retry + 1, 6)
            await asyncio.sleep(0.25 * 2**retry)
        try:
            async with page_socket(base + str(last_seq), server=server, cookie=cookie) as ws:
                retry = 0
                for _ in range(1000):  # a run here has ~12 events and a dozen status lines
                    received = await receive(ws, deadline)
                    if received is None:
                        watch.error = "timed out"
                        return
                    data, at = received
                    if data["type"] == "event" and data["seq"] > last_seq:
                        last_seq = data["seq"]
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


# ------------------------------------------------------------------ numbers


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` % of them at or below it
    (NaN for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def percentile_rounded(values: Sequence[float], q: float) -> float:
    """The sorted values' element at index round(q % × (n − 1)) (NaN for none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def ms(seconds: float, *, tenths: bool = False) -> str:
    """Seconds as whole milliseconds, "—" for NaN; ``tenths``: one decimal under 100 ms."""
    if math.isnan(seconds):
        return "—"
    if tenths and seconds < 0.1:
        return f"{seconds * 1000:.1f}"
    return f"{seconds * 1000:.0f}"

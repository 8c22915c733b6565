"""The production processes as subprocesses: uvicorn web servers and Celery workers.

What a deployment runs, each in a process of its own that shares nothing with the test
process but PostgreSQL and Redis (the test database, ``REDIS_URL``, ``CHANNELS_PREFIX``):

* :func:`start_web` serves ``tau2site.asgi:application`` with uvicorn on a free port
  (:func:`free_port`, also the suite's one way to pick a port);
* :func:`start_router` runs ``python -m tau2_env.gate.session_router`` over an ASGI app;
* :func:`start_worker` runs ``celery -A tau2site worker`` on one queue;
* :func:`start_beat` runs ``celery -A tau2site beat`` (the reaper and the dispatcher);
* :func:`wait_until_up` waits for them all to answer (``/health``, Celery ``ping``), so
  several start in parallel; :func:`stop` ends one (terminate, then kill).

Every process gets :func:`environment`: the test database, every LLM provider pointed at
the scripted server, no credential, no embedded worker.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tests.support.llm_server import ScriptedLLM

__all__ = [
    "Process",
    "environment",
    "free_port",
    "start_beat",
    "start_router",
    "start_web",
    "start_worker",
    "stop",
    "wait_until_up",
]

ROOT = Path(__file__).resolve().parents[2]
_CREDENTIALS = ("HF_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DJANGO_ALLOW_ASYNC_UNSAFE")


@dataclass
class Process:
    """A started server process: a web server (``url``) or a Celery worker (``node``)."""

    proc: subprocess.Popen
    url: str = ""
    node: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ws_url(self, path: str) -> str:
        return self.url.replace("http://", "ws://", 1) + path


def environment(*, llm: ScriptedLLM, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a server process: the test database (the one
    pytest-django created, not ``DATABASE_URL``'s), the scripted LLM for every provider,
    no credentials and no embedded worker; then ``extra``."""
    from django.db import connection

    db = connection.settings_dict
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    env = {name: value for name, value in os.environ.items() if name not in _CREDENTIALS}
    env.update(
        DATABASE_URL=f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        TAU2_HF_ROUTER_URL=llm.base_url,
        TAU2_HF_HUB_URL=llm.hub_url,
        OPENAI_BASE_URL=llm.base_url,
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{llm.port}",
        TAU2_EMBEDDED_WORKER="false",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    env.update(extra or {})
    return env


def free_port() -> int:
    """A local TCP port nothing listens on right now: the system's pick for a bind to
    port 0, released at once (for a server to bind, or as a port that refuses)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(env: dict[str, str], *, workers: int = 1, args: tuple[str, ...] = ()) -> Process:
    """Start ``uvicorn tau2site.asgi:application`` (``workers`` processes on one socket,
    as ``--workers``) on a free local port; ``args`` go on its command line."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "tau2site.asgi:application"]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        + ["--ws", "websockets-sansio", "--workers", str(workers), *args],
        cwd=ROOT,
        env=env,
    )
    return Process(proc=proc, url=f"http://127.0.0.1:{port}")


def start_router(
    env: dict[str, str], *, app: str, processes: int = 2, args: tuple[str, ...] = ()
) -> Process:
    """Start ``python -m tau2_env.gate.session_router app`` (``processes`` uvicorns behind
    it) on a free local port, as a deployment starts it; ``args`` go on its command line."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tau2_env.gate.session_router", app, "--processes", str(processes)]
        + ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *args],
        cwd=ROOT,
        env=env,
    )
    return Process(proc=proc, url=f"http://127.0.0.1:{port}")


def start_worker(
    env: dict[str, str], *, queue: str, name: str, pool: str = "threads", concurrency: int = 4
) -> Process:
    """Start ``celery -A tau2site worker`` consuming ``queue``, as node ``name-<pid>@localhost``."""
    node = f"{name}-{os.getpid()}@localhost"
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tau2site", "worker"]
        + ["--pool", pool, "--concurrency", str(concurrency), "--loglevel", "WARNING"]
        + ["--without-gossip", "--without-mingle", "-Q", queue, "-n", node],
        cwd=ROOT,
        env=env,
    )
    return Process(proc=proc, node=node)


def start_beat(env: dict[str, str], *, schedule: Path) -> Process:
    """Start ``celery -A tau2site beat``, keeping its schedule in the file ``schedule``.
    It sends its tasks to ``CELERY_QUEUE`` of ``env``; it answers no ping, so it is not
    for :func:`wait_until_up`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "tau2site", "beat"]
        + ["--loglevel", "WARNING", "--schedule", str(schedule)],
        cwd=ROOT,
        env=env,
    )
    return Process(proc=proc)


def _answers(process: Process) -> bool:
    if process.url:
        try:
            with urllib.request.urlopen(f"{process.url}/health", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False
    from tau2site.celery import app

    return bool(app.control.ping(destination=[process.node], timeout=1))


def wait_until_up(*processes: Process, timeout: float = 180.0) -> None:
    """Wait until every process answers; raises ``RuntimeError`` if one exits or the
    time runs out (generous: several Python processes import τ² at once)."""
    waiting = list(processes)
    deadline = time.monotonic() + timeout
    while waiting:
        for process in list(waiting):
            if process.proc.poll() is not None:
                raise RuntimeError(
                    f"{process.url or process.node} exited with {process.proc.returncode}"
                )
            if _answers(process):
                waiting.remove(process)
        if waiting and time.monotonic() > deadline:
            names = ", ".join(p.url or p.node for p in waiting)
            raise RuntimeError(f"not up after {timeout:.0f} s: {names}")
        if waiting:
            time.sleep(0.25)


def stop(process: Process, *, timeout: float = 30.0) -> None:
    """Terminate (uvicorn and Celery shut down gracefully on SIGTERM), then kill."""
    if process.proc.poll() is not None:
        return
    process.proc.terminate()
    try:
        process.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.proc.kill()
        process.proc.wait(timeout=10)

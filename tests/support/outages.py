"""Dependencies that go away under a running web server, and what its clients then see.

* A Redis of the test's own to stop and start is ``tests.support.servers.RedisServer``.
* :class:`CuttableProxy` stands between a server process and PostgreSQL: :meth:`cut` ends
  every connection through it and refuses new ones, as a database server that went away;
  :meth:`restore` lets them through again.
* :func:`web_server` serves the site from a uvicorn process of its own, with the
  environment a test gives it (its Redis, its database URL); :func:`watched_by` makes
  what a person watches there (:class:`Watched`: a running evaluation and its run).
* :func:`open_socket` opens a WebSocket as a page does, :func:`handshake` says how that
  went (:class:`Handshake`), :func:`closed_with` how an open one ended; :func:`get` reads
  a page or JSON; :class:`Probe` asks again and again on a thread, as visitors' browsers
  do while a dependency restarts.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from apps.evaluations.models import Evaluation
from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tests.support import processes
from tests.support.processes import free_port

__all__ = [
    "CuttableProxy",
    "Handshake",
    "Probe",
    "Reply",
    "Watched",
    "closed_with",
    "get",
    "handshake",
    "open_socket",
    "wait_for",
    "watched_by",
    "web_server",
]

TIMEOUT = 10.0  # seconds for one request or frame on a loaded 2-core machine


def wait_for(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Until ``condition()``; ``AssertionError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {timeout:.0f} s"
        time.sleep(0.05)


@contextlib.contextmanager
def web_server(llm, **env: str) -> Iterator[processes.Process]:
    """A uvicorn process serving the site (``tau2site.asgi:application``) with ``env`` on
    top of the suite's server environment, up until the ``with`` ends."""
    web = processes.start_web(processes.environment(llm=llm, extra=env))
    try:
        processes.wait_until_up(web)
        yield web
    finally:
        processes.stop(web)


@dataclass(frozen=True)
class Watched:
    """A person's running evaluation and its run (three events stored), as their pages
    and sockets ask for them, with the person's session ``cookie``."""

    cookie: str
    evaluation_id: int
    run_id: int

    @property
    def sockets(self) -> tuple[str, str]:
        return (f"/ws/evaluations/{self.evaluation_id}/", f"/ws/runs/{self.run_id}/")

    @property
    def state(self) -> str:
        return f"/evaluations/{self.evaluation_id}/state/"

    @property
    def pages(self) -> tuple[str, str]:
        return (f"/evaluations/{self.evaluation_id}/", f"/runs/{self.run_id}/")


def watched_by(user) -> Watched:
    """Store a running evaluation of airline/27 by ``user`` with one running run that has
    said three things (committed rows: the server process sees them)."""
    common = {"created_by": user, "domain": "airline", "agent_model": "org/model-a"}
    evaluation = Evaluation.objects.create(
        **common, task_ids=["27"], user_model="u/m", trial_seeds=[300]
    )
    run = Run.objects.create(
        **common,
        task=Task.objects.get(domain_id="airline", task_id="27"),
        evaluation=evaluation,
        user_model="u/m",
        status=Run.Status.RUNNING,
        started_at=timezone.now(),
        n_messages=3,
    )
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run,
            seq=seq,
            kind=RunEvent.Kind.AGENT if seq % 2 == 0 else RunEvent.Kind.CUSTOMER,
            message={"role": "assistant" if seq % 2 == 0 else "user", "content": f"line {seq}"},
        )
        for seq in range(3)
    )
    client = Client()
    client.force_login(user)
    return Watched(client.cookies["sessionid"].value, evaluation.pk, run.pk)


class CuttableProxy:
    """A TCP proxy from a free local port to ``host:port``, on threads of this process."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> CuttableProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    restore = start

    def cut(self) -> None:
        """End every connection and refuse new ones (the port no longer listens)."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, set()
        for sock in [listener, *sockets]:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked on it
                sock.close()

    stop = cut

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            try:
                server = socket.create_connection(self.target, timeout=TIMEOUT)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    server.close()
                    return
                self._open |= {client, server}
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@dataclass(frozen=True)
class Handshake:
    """How a WebSocket went: refused with HTTP ``status``, or accepted and then closed by
    the server with ``code`` and ``reason`` before or after its first ``frame``."""

    status: int | None = None
    code: int | None = None
    reason: str = ""
    frame: str | None = None


def open_socket(url: str, *, cookie: str, origin: str) -> ClientConnection:
    """A WebSocket to ``url`` as the site's page at ``origin`` with the session ``cookie``
    (``InvalidStatus`` if the server refuses the handshake)."""
    return connect(
        url,
        origin=origin,
        additional_headers={"Cookie": f"sessionid={cookie}"},
        open_timeout=TIMEOUT,
        close_timeout=2,
    )


def closed_with(ws: ClientConnection, *, timeout: float = TIMEOUT) -> tuple[int | None, str]:
    """Reads ``ws`` until the server closes it: its close code and reason (``TimeoutError``
    if it stays open and silent ``timeout`` s)."""
    try:
        while True:
            ws.recv(timeout=timeout)
    except ConnectionClosed as closed:
        received = closed.rcvd
        return (received.code, received.reason) if received else (None, "")


def handshake(url: str, *, cookie: str, origin: str) -> Handshake:
    """Open ``url`` (:func:`open_socket`) and read one frame: how it went."""
    try:
        ws = open_socket(url, cookie=cookie, origin=origin)
    except InvalidStatus as refused:
        return Handshake(status=refused.response.status_code)
    with ws:
        try:
            return Handshake(status=101, frame=ws.recv(timeout=TIMEOUT))
        except ConnectionClosed as closed:
            received = closed.rcvd
            code, reason = (received.code, received.reason) if received else (None, "")
            return Handshake(status=101, code=code, reason=reason)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # by lower-case name
    body: str


def get(url: str, *, cookie: str, accept: str) -> Reply:
    """``GET url`` with the session ``cookie`` and ``Accept: accept``; any status."""
    request = urllib.request.Request(
        url, headers={"Cookie": f"sessionid={cookie}", "Accept": accept}
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
            return Reply(response.status, _headers(response), response.read().decode())
    except urllib.error.HTTPError as error:
        return Reply(error.code, _headers(error), error.read().decode())


def _headers(response) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.items()}


@dataclass
class Probe:
    """Asks ``ask()`` again and again on a thread (every ``every`` s) while in ``with``;
    ``seen`` holds each answer in order, or the exception that made it fail."""

    ask: Callable[[], object]
    every: float = 0.1
    seen: list = field(default_factory=list)

    @contextlib.contextmanager
    def running(self) -> Iterator[Probe]:
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    self.seen.append(self.ask())
                except Exception as error:  # a broken connection: the visitor saw that
                    self.seen.append(error)
                stop.wait(self.every)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=2 * TIMEOUT)

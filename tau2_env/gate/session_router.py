"""Several OpenEnv processes behind one port, each session kept on the process holding it.

One Python process runs Python on one core at a time, and an OpenEnv session is an
object in the memory of the process that created it. ``python -m tau2_env.gate.session_router``
starts ``--processes`` uvicorn processes serving the same ASGI app on 127.0.0.1 and
listens on ``--host``/``--port`` in front of them, streaming bytes both ways (it never
reads a WebSocket frame). Per connection it reads the request's head only and picks the
process:

* a request naming a session goes to the process that holds it: ``/ws?session_id=…``
  (openenv's ``MCPToolClient`` attaching to its HTTP session), ``POST /mcp`` whose
  JSON-RPC ``params.session_id`` names one (the body of a ``/mcp`` POST is read first;
  it is small JSON), ``/agent/mcp`` with an ``Mcp-Session-Id`` header;
* where a session is made it learns which process holds it: the answer to
  ``openenv/session/create`` (its ``result.session_id``) and an ``/agent/mcp`` answer's
  ``Mcp-Session-Id`` header. It forgets a session only once the process holding it
  has closed it: an ``openenv/session/close`` answered with a JSON-RPC ``result``, a
  ``DELETE /agent/mcp`` answered 2xx. A refused one (another client's session: 404)
  changes nothing, so a stranger cannot send the owner's next calls astray. (A session
  closed over ``/ws`` keeps its route until it ages out: the router never reads a
  frame, and its process answers its id as unknown, as any would.)
* anything else — a new ``/ws`` session, stateless ``/reset`` and ``/step``,
  ``/health`` — goes to the process with the fewest open connections, so one client's
  sessions spread over every process.

Each HTTP request is sent on a connection of its own (``Connection: close``), so the next
request of a keep-alive client is routed afresh. Every answer carries
``X-Tau2-Process: <index>``.

The client's address and scheme are the router's to say, as uvicorn's
``--forwarded-allow-ips`` says them: it sends the processes one ``X-Forwarded-For`` and
one ``X-Forwarded-Proto`` — the peer's address and the router's own scheme (``http``: it
listens on plain TCP), or, when the peer is one of the proxies named in
``--trusted-proxies`` (``TAU2_ROUTER_TRUSTED_PROXIES``: IPs and CIDRs, comma-separated;
default none), the address and scheme that proxy gave. It drops every ``X-Forwarded-*``,
``X-Real-IP`` and ``Forwarded`` a client sent; a trusted proxy's other ``X-Forwarded-*``
(``-Host``, ``-Port``, ``-Prefix``) pass. The processes trust the router (127.0.0.1) and no
one else, so per-address caps, logs and the scheme never take a client's word.

Caps: the processes share one ledger of open sessions (:mod:`tau2_env.gate.shared_slots`: a
SQLite file the router names in ``TAU2_SLOTS_LEDGER``, or, with ``TAU2_SLOTS_URL``, a Redis
every host shares), so a client's cap (a person's, a studio key's own) counts its sessions
on every process; ``MAX_CONCURRENT_ENVS`` counts per process. A process that exits is
started again (its sessions are gone; the ledger drops them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

import cachetools

from tau2_env import config

__all__ = ["Backend", "Router", "TrustedProxies", "main"]

logger = logging.getLogger(__name__)

HEAD_LIMIT = 64 * 1024  # a request's or an answer's head, at most
PEEK_LIMIT = 1024 * 1024  # a /mcp body read to find its session id, at most
SESSIONS_KEPT = 100_000  # session id → process, the latest
CHUNK = 64 * 1024
HEAD_TIMEOUT_S = 60.0  # a client that sends no request head within this is dropped
PROCESS_HEADER = b"x-tau2-process"
TRUSTED_PROXIES_VAR = "TAU2_ROUTER_TRUSTED_PROXIES"
# What a client may say of its own address and scheme; the router sends the processes its
# own (from a trusted proxy: what the proxy said). Every other X-Forwarded-* passes from a
# trusted proxy only.
ADDRESS_HEADERS = (b"x-forwarded-for", b"x-forwarded-proto", b"x-real-ip", b"forwarded")
FORWARDED_PREFIX = b"x-forwarded-"
ROUTER_SCHEME = b"http"  # the router listens on plain TCP: TLS, if any, ends at a proxy
SCHEMES = frozenset({b"http", b"https", b"ws", b"wss"})  # what uvicorn takes as a scheme


@dataclass
class Backend:
    """One uvicorn process: where it listens and how many connections it has open."""

    index: int
    port: int
    proc: subprocess.Popen | None = None
    open: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class _Head:
    """A request's or an answer's head: its first line and headers, as sent."""

    line: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    @classmethod
    def parse(cls, raw: bytes) -> _Head:
        lines = raw.rstrip(b"\r\n").split(b"\r\n")
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise ValueError("a header without ':'")
            headers.append((name.strip(), value.strip()))
        return cls(line=lines[0], headers=headers)

    def get(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def values(self, name: bytes) -> list[bytes]:
        return [value for key, value in self.headers if key.lower() == name]

    def status(self) -> int:
        """An answer's status code (0 if its first line has none)."""
        parts = self.line.split(b" ", 2)
        return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

    def without(self, *names: bytes) -> list[tuple[bytes, bytes]]:
        return [(k, v) for k, v in self.headers if k.lower() not in names]

    def encode(self, headers: list[tuple[bytes, bytes]] | None = None) -> bytes:
        lines = [self.line, *(k + b": " + v for k, v in (headers or self.headers))]
        return b"\r\n".join(lines) + b"\r\n\r\n"


_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class TrustedProxies:
    """The proxies whose word on a client's address the router takes (none by default)."""

    networks: tuple[_Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """IPs and CIDRs, comma-separated (blank: none). Raises ``ValueError`` saying
        which item is wrong; ``*`` is refused (it would trust every client's header)."""
        networks = []
        for item in filter(None, (part.strip() for part in text.split(","))):
            if item == "*":
                raise ValueError(
                    "'*' would take every client's X-Forwarded-For as its address: name "
                    "the proxies in front of the router (IPs or CIDRs, comma-separated)"
                )
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"{item!r} is neither an IP address nor a CIDR") from None
        return cls(networks=tuple(networks))

    def __contains__(self, address: _Address) -> bool:
        return any(address in network for network in self.networks)

    def trusts(self, peer: str) -> bool:
        """Whether ``peer`` (the connection's own address) is one of these proxies."""
        address = _address(peer)
        return address is not None and address in self

    def scheme_of(self, peer: str, head: _Head) -> bytes:
        """The scheme the client used: the router's own (``http``), unless ``peer`` is a
        trusted proxy that sent one ``X-Forwarded-Proto`` uvicorn takes (``http``,
        ``https``, ``ws``, ``wss``); then that."""
        if not self.trusts(peer):
            return ROUTER_SCHEME
        values = head.values(b"x-forwarded-proto")
        said = values[0].strip().lower() if len(values) == 1 else b""
        return said if said in SCHEMES else ROUTER_SCHEME

    def client_of(self, peer: str, head: _Head) -> str:
        """The client's address: ``peer``, unless ``peer`` is a trusted proxy; then the
        nearest address its ``X-Forwarded-For`` chain names that is not a trusted proxy
        (read from the right: the left is whatever the client wrote), else its
        ``X-Real-IP``. An entry that is not an address ends the walk at the last
        trusted hop."""
        address = _address(peer)
        if address is None or address not in self:
            return str(address) if address is not None else peer
        chain = [
            entry.strip()
            for value in head.values(b"x-forwarded-for")
            for entry in value.decode("latin-1").split(",")
            if entry.strip()
        ]
        if not chain:
            real_ip = _address((head.get(b"x-real-ip") or b"").decode("latin-1"))
            return str(real_ip or address)
        for entry in reversed(chain):
            hop = _address(entry)
            if hop is None:
                break
            address = hop
            if hop not in self:
                break
        return str(address)


def _address(text: str) -> _Address | None:
    """The IP address ``text`` names (``1.2.3.4``, ``1.2.3.4:5678``, ``[::1]:80``,
    ``::1``; an IPv4-mapped IPv6 address as IPv4), or ``None``."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


class Router:
    """The routing and byte pumping of :mod:`tau2_env.gate.session_router` over ``backends``; the
    client's address as :meth:`TrustedProxies.client_of` says (``trusted``: none)."""

    def __init__(self, backends: list[Backend], *, trusted: TrustedProxies | None = None) -> None:
        self.backends = backends
        self.trusted = trusted or TrustedProxies()
        # Session id → backend index, the latest SESSIONS_KEPT by their last call. One
        # event loop uses it: no lock.
        self.sessions: cachetools.LRUCache[str, int] = cachetools.LRUCache(SESSIONS_KEPT)
        self._turn = 0

    # ------------------------------------------------------------ routing

    def pick(self) -> Backend:
        """The backend with the fewest open connections (in turn among equals)."""
        self._turn += 1
        count = len(self.backends)
        order = [self.backends[(self._turn + i) % count] for i in range(count)]
        return min(order, key=lambda b: b.open)

    def holder(self, session_id: str | None) -> Backend | None:
        index = self.sessions.get(session_id) if session_id else None
        return self.backends[index] if index is not None else None

    def learn(self, session_id: str, backend: Backend) -> None:
        self.sessions[session_id] = backend.index

    def forget(self, session_id: str | None) -> None:
        if session_id:
            self.sessions.pop(session_id, None)

    # ------------------------------------------------------------ serving

    async def serve(self, host: str, port: int, *, backlog: int = 4096) -> asyncio.Server:
        return await asyncio.start_server(
            self.handle, host, port, backlog=backlog, limit=HEAD_LIMIT, reuse_address=True
        )

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except Exception:
            logger.exception("Routing a connection failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            head = _Head.parse(raw)
            method, target, _ = head.line.split(b" ", 2)
        except (ValueError, asyncio.LimitOverrunError):
            writer.write(_plain(400, "Bad request head."))
            return
        except (asyncio.IncompleteReadError, TimeoutError):
            return
        path, _, query = target.decode("latin-1").partition("?")
        websocket = (head.get(b"upgrade") or b"").lower() == b"websocket"
        body = b""
        rpc: dict | None = None
        length = _content_length(head)
        if method == b"POST" and path.rstrip("/") == "/mcp" and 0 < length <= PEEK_LIMIT:
            body = await reader.readexactly(length)
            rpc = _json_object(body)
        session_id = _session_of(path, query, head, rpc)
        backend = self.holder(session_id) or self.pick()
        creates = rpc is not None and rpc.get("method") == "openenv/session/create"
        closes = rpc is not None and rpc.get("method") == "openenv/session/close"
        agent_mcp = path.rstrip("/") == "/agent/mcp"
        deletes = agent_mcp and method == b"DELETE"

        peer = writer.get_extra_info("peername")
        client = self.trusted.client_of(peer[0], head) if peer else ""
        trusted_peer = bool(peer) and self.trusted.trusts(peer[0])
        scheme = self.trusted.scheme_of(peer[0], head) if peer else ROUTER_SCHEME
        headers = _forwarded(
            head, client, scheme=scheme, from_proxy=trusted_peer, websocket=websocket
        )
        backend.open += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(
                "127.0.0.1", backend.port, limit=HEAD_LIMIT
            )
        except OSError:
            backend.open -= 1
            writer.write(_plain(503, "The OpenEnv process is not answering; retry shortly."))
            return
        try:
            up_writer.write(head.encode(headers) + body)
            # What is left of the request (a body not read above, WebSocket frames).
            upstream = asyncio.ensure_future(_pump(reader, up_writer))
            try:
                answer = await self._answer_head(up_reader, backend)
                if answer is None:
                    return
                if agent_mcp and not websocket and not deletes:
                    self._learn_from(answer.get(b"mcp-session-id"), backend)
                if creates or closes:
                    answer_body = await up_reader.readexactly(_content_length(answer))
                    writer.write(answer.encode() + answer_body)
                    reply = _json_object(answer_body) or {}
                    result = reply.get("result")
                    if creates and isinstance(result, dict):
                        self._learn_from(result.get("session_id"), backend)
                    # Forgotten only once its process has closed it: a stranger's close
                    # (refused, 404) leaves the owner's calls going where they must.
                    if closes and _succeeded(answer) and "result" in reply:
                        self.forget(session_id)
                else:
                    writer.write(answer.encode())
                    if deletes and _succeeded(answer):
                        self.forget(session_id)
                await _pump(up_reader, writer)
            finally:
                upstream.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await upstream
        finally:
            backend.open -= 1
            up_writer.close()
            with contextlib.suppress(Exception):
                await up_writer.wait_closed()

    async def _answer_head(self, up_reader: asyncio.StreamReader, backend: Backend) -> _Head | None:
        try:
            answer = _Head.parse(await up_reader.readuntil(b"\r\n\r\n"))
        except (asyncio.IncompleteReadError, ValueError):
            return None
        answer.headers.append((PROCESS_HEADER, str(backend.index).encode()))
        return answer

    def _learn_from(self, session_id: object, backend: Backend) -> None:
        if isinstance(session_id, bytes):
            session_id = session_id.decode("latin-1")
        if isinstance(session_id, str) and session_id:
            self.learn(session_id, backend)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy ``reader`` to ``writer`` until end of stream, then half-close ``writer``."""
    while True:
        data = await reader.read(CHUNK)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()


def _content_length(head: _Head) -> int:
    try:
        return int(head.get(b"content-length") or 0)
    except ValueError:
        return 0


def _json_object(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _session_of(path: str, query: str, head: _Head, rpc: dict | None) -> str | None:
    """The session a request names: JSON-RPC ``params.session_id``, an ``Mcp-Session-Id``
    header, or the query's ``session_id``."""
    params = rpc.get("params") if rpc is not None else None
    if isinstance(params, dict) and isinstance(params.get("session_id"), str):
        return params["session_id"]
    header = head.get(b"mcp-session-id")
    if header:
        return header.decode("latin-1")
    if query:
        values = parse_qs(query).get("session_id")
        if values:
            return values[-1]
    return None


def _succeeded(answer: _Head) -> bool:
    return 200 <= answer.status() < 300


def _forwarded(
    head: _Head, client: str, *, scheme: bytes, from_proxy: bool, websocket: bool
) -> list[tuple[bytes, bytes]]:
    """The request's headers for a backend: the client's address (``client``, as the
    router decided it) as the one ``X-Forwarded-For`` and ``scheme`` as the one
    ``X-Forwarded-Proto``, without the ``X-Forwarded-For``, ``X-Forwarded-Proto``,
    ``X-Real-IP`` and ``Forwarded`` the request brought, nor (unless ``from_proxy``, a
    trusted proxy's request) any other ``X-Forwarded-*``; and ``Connection: close`` on
    plain HTTP (one request per backend connection)."""
    drop = list(ADDRESS_HEADERS)
    if not websocket:
        drop += [b"connection", b"keep-alive"]
    headers = [
        (name, value)
        for name, value in head.without(*drop)
        if from_proxy or not name.lower().startswith(FORWARDED_PREFIX)
    ]
    if client:
        headers.append((b"x-forwarded-for", client.encode()))
    headers.append((b"x-forwarded-proto", scheme))
    if not websocket:
        headers.append((b"connection", b"close"))
    return headers


def _plain(status: int, text: str) -> bytes:
    reason = {400: "Bad Request", 503: "Service Unavailable"}.get(status, "Error")
    body = text.encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    ).encode() + body


# ------------------------------------------------------------------ the processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_backend(backend: Backend, *, app: str, env: dict[str, str], extra: list[str]) -> None:
    """Start ``backend``'s uvicorn (``TAU2_PROCESS_INDEX`` set in its environment). It
    takes ``X-Forwarded-For`` and ``X-Forwarded-Proto`` from the router (127.0.0.1) only:
    the router has decided the client's address and scheme
    (:meth:`TrustedProxies.client_of`, :meth:`TrustedProxies.scheme_of`)."""
    command = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1"]
    command += ["--port", str(backend.port)]
    command += ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
    backend.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
        command + extra, env={**env, "TAU2_PROCESS_INDEX": str(backend.index)}
    )


def wait_until_up(backends: list[Backend], *, timeout: float) -> None:
    """Wait until every backend answers ``/health``; raises ``RuntimeError`` if one exits
    or does not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for backend in backends:
        while True:
            if backend.proc is not None and backend.proc.poll() is not None:
                raise RuntimeError(f"process {backend.index} exited ({backend.proc.returncode})")
            try:
                with urllib.request.urlopen(backend.url + "/health", timeout=2):  # noqa: S310
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"process {backend.index} did not answer /health") from None
                time.sleep(0.2)


async def _supervise(backends: list[Backend], restart) -> None:
    """Start a backend again when its process exits."""
    while True:
        await asyncio.sleep(1.0)
        for backend in backends:
            if backend.proc is not None and backend.proc.poll() is not None:
                logger.warning(
                    "OpenEnv process %s exited (%s); starting it again",
                    backend.index,
                    backend.proc.returncode,
                )
                restart(backend)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tau2_env.gate.session_router", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("app", nargs="?", default="tau2site.asgi:application")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument(
        "--trusted-proxies",
        "--forwarded-allow-ips",
        default=config.env_value(TRUSTED_PROXIES_VAR) or "",
        help="the proxies in front whose X-Forwarded-For names the client (IPs, CIDRs; "
        f"default ${TRUSTED_PROXIES_VAR}, else none): every other peer is the client",
    )
    parser.add_argument("--backlog", type=int, default=4096)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    args, extra = parser.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    try:
        trusted = TrustedProxies.parse(args.trusted_proxies)
    except ValueError as exc:
        parser.error(f"--trusted-proxies / {TRUSTED_PROXIES_VAR}: {exc}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    ledger_dir = tempfile.mkdtemp(prefix="tau2-slots-")
    env = {**os.environ, "TAU2_SLOTS_LEDGER": str(Path(ledger_dir) / "slots.sqlite3")}
    backends = [Backend(index=i, port=_free_port()) for i in range(max(1, args.processes))]

    def start(backend: Backend) -> None:
        start_backend(backend, app=args.app, env=env, extra=extra)

    for backend in backends:
        start(backend)
    try:
        wait_until_up(backends, timeout=args.start_timeout)
        asyncio.run(_serve(Router(backends, trusted=trusted), args, start))
    finally:
        for backend in backends:
            if backend.proc is not None and backend.proc.poll() is None:
                backend.proc.terminate()
        for backend in backends:
            if backend.proc is not None:
                try:
                    backend.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    backend.proc.kill()


async def _serve(router: Router, args: argparse.Namespace, restart) -> None:
    server = await router.serve(args.host, args.port, backlog=args.backlog)
    logger.info(
        "Routing http://%s:%s to %d OpenEnv processes", args.host, args.port, len(router.backends)
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    supervisor = asyncio.create_task(_supervise(router.backends, restart))
    async with server:
        await stopping.wait()
    supervisor.cancel()


if __name__ == "__main__":
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    main()

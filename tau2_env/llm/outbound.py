"""Where the server's requests to model endpoints may go, and how long and how much each
may take.

People type endpoints (a connection's base URL), and the server then calls them: with
the connection's key, from inside the operator's network. So, as OWASP's SSRF
prevention cheat sheet says, every request to a model endpoint is checked *when it
connects*, after the name is resolved (a name that resolves elsewhere later is checked
again then):

* **Destinations.** Only global addresses: loopback, private (10/8, 172.16/12,
  192.168/16, fc00::/7), link-local (169.254/16, where clouds serve their metadata;
  fe80::/10), shared (100.64/10), unspecified (0.0.0.0, ::), multicast and reserved
  addresses are refused, as are the metadata services' names, unless the operator
  allows them in ``TAU2_OUTBOUND_ALLOW`` (networks such as ``127.0.0.0/8`` or host
  names; tests and laptops allow loopback there). The hosts of the operator's own
  provider settings (``TAU2_HF_ROUTER_URL``, ``OPENAI_BASE_URL``,
  ``ANTHROPIC_BASE_URL``) are the operator's choice and always allowed. A name that
  resolves to any refused address is refused whole. Redirects are not followed.
* **Time.** One deadline per request: the call's timeout bounds the connection, each
  read *and the whole answer*, so an endpoint that trickles a byte at a time cannot
  hold a thread past it.
* **Size.** The answer is read up to ``TAU2_LLM_MAX_REPLY_BYTES`` (default 8 MiB),
  decompressed too; past that the request fails instead of filling memory.
* **Stop.** A request made inside :func:`interruptible` ends within about
  :data:`POLL_SECONDS` once its event is set (a run that is stopped).

Failures are :class:`OutboundError` subclasses whose ``str()`` says what happened in
words, for the person, with no address beyond the one they typed. litellm and the
OpenAI SDK wrap them; :func:`tau2_env.llm.gateway.explain_error` finds them in the chain.

Two ways out use it: :func:`client` (an ``httpx.Client`` whose transport is
:class:`Transport`: litellm's calls, the Test, reading a connection's models) and
:mod:`tau2_env.llm.wire` (the direct path's own sockets, through :func:`connect`).
"""

from __future__ import annotations

import contextvars
import http.cookiejar
import ipaddress
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpcore
import httpx

from tau2_env import config

__all__ = [
    "POLL_SECONDS",
    "CallInterrupted",
    "DeadlineExceeded",
    "DestinationRefused",
    "OutboundError",
    "ReplyTooLarge",
    "Transport",
    "as_httpx",
    "bounded",
    "check_url",
    "client",
    "connect",
    "decode",
    "interruptible",
    "read_within",
    "set_request_observer",
]

# How often a blocked read looks at its deadline and at a stop: a stopped run's call
# ends within about this long.
POLL_SECONDS = 1.0

# The names cloud metadata services answer on (their addresses are link-local anyway).
_METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
        "100-100-100-200.metadata",
    }
)


class OutboundError(Exception):
    """A request to a model endpoint that the policy ended; ``str()`` says why, in words.

    ``kind`` is what :func:`tau2_env.llm.gateway.explain_error` calls it."""

    kind = "error"


class DestinationRefused(OutboundError, httpcore.ConnectError):
    """The endpoint's address is one the server does not call."""

    kind = "not_allowed"


class DeadlineExceeded(OutboundError, httpcore.ReadTimeout):
    """The whole answer did not come within the call's deadline; ``received`` is how
    many bytes of it had come (0: none, a plain timeout)."""

    kind = "timeout"

    def __init__(self, message: str, *, received: int = 0) -> None:
        super().__init__(message)
        self.received = received


class ReplyTooLarge(OutboundError, httpcore.ReadError):
    """The answer passed the size cap."""

    kind = "too_large"


class CallInterrupted(OutboundError, httpcore.ReadError):
    """The call's conversation was stopped while it waited."""

    kind = "interrupted"


# --------------------------------------------------------------------- destinations


@dataclass(frozen=True)
class _Allowed:
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    names: frozenset[str]  # host names allowed on any port
    origins: frozenset[tuple[str, int]]  # the operator's endpoints: host and port

    def trusts(self, host: str, port: int) -> bool:
        name = host.lower().rstrip(".")
        return name in self.names or (name, port) in self.origins


def _origin(url: str) -> tuple[str, int] | None:
    parts = urlsplit(url)
    if not parts.hostname:
        return None
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return parts.hostname.lower().rstrip("."), port


@lru_cache(maxsize=8)
def _allowed(raw: str, operator: tuple[str, ...]) -> _Allowed:
    networks = []
    names: set[str] = set()
    origins = frozenset(o for o in map(_origin, operator) if o is not None)
    for item in raw.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            if "/" in item or ":" in item:
                raise config.ConfigError(
                    f"TAU2_OUTBOUND_ALLOW: {item!r} is neither a network nor a host name"
                ) from None
            names.add(item.lower().rstrip("."))
    return _Allowed(tuple(networks), frozenset(names), origins)


def _policy() -> _Allowed:
    return _allowed(config.outbound_allow(), config.operator_endpoints())


def _address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why the server does not call ``address`` (None when it may)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "a loopback address (this server itself)"
    if address.is_link_local:
        return "a link-local address (where cloud metadata services answer)"
    if address.is_unspecified:
        return "an unspecified address (0.0.0.0 reaches this server)"
    if address.is_multicast:
        return "a multicast address"
    if address.is_private or (isinstance(address, ipaddress.IPv4Address) and address in _SHARED):
        return "a private address (inside this server's network)"
    if not address.is_global:
        return "a reserved address"
    return None


_SHARED = ipaddress.ip_network("100.64.0.0/10")


def _refusal(host: str, what: str) -> DestinationRefused:
    return DestinationRefused(
        f"{host} is {what}: the server does not call private, loopback, link-local or "
        "metadata addresses for an endpoint people type (its operator may allow some in "
        "TAU2_OUTBOUND_ALLOW)"
    )


def _checked(host: str, infos: Iterable[tuple]) -> list[tuple]:
    """``getaddrinfo``'s answers for ``host`` if every address may be called."""
    allowed = _policy()
    infos = list(infos)
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if any(address in network for network in allowed.networks):
            continue
        problem = _address_problem(address)
        if problem is not None:
            shown = host if host == str(address) else f"{host} ({address})"
            raise _refusal(shown, problem)
    return infos


def resolve(host: str, port: int) -> list[tuple]:
    """``getaddrinfo(host, port)`` for TCP, when the policy lets the server call every
    address it gives; raises :class:`DestinationRefused` otherwise (``socket.gaierror``
    for a name that does not resolve)."""
    if _policy().trusts(host, port):
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if host.lower().rstrip(".") in _METADATA_NAMES:
        raise _refusal(host, "a cloud metadata service")
    return _checked(host, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def check_url(url: str) -> None:
    """Raises :class:`DestinationRefused` when the policy refuses ``url``'s host as it
    resolves now (a name that does not resolve yet passes: it is checked at connect).
    For forms: the same check runs again at every connection."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    except (socket.gaierror, UnicodeError):
        return


def connect(
    host: str, port: int, *, timeout: float | None, sock_class: type[socket.socket] = socket.socket
) -> socket.socket:
    """A TCP connection (a ``sock_class``) to ``host``:``port`` on an address the policy
    allows, within ``timeout`` (and the current call's deadline). Raises
    :class:`DestinationRefused`, ``socket.gaierror`` or the last address's ``OSError``."""
    last: OSError | None = None
    for family, kind, proto, _, address in resolve(host, port):
        sock = sock_class(family, kind, proto)
        try:
            sock.settimeout(_within(timeout))
            sock.connect(address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        sock.settimeout(timeout)
        return sock
    raise last or OSError(f"no address for {host}")


# --------------------------------------------------------------------- one call


@dataclass
class _Call:
    """The request under way in this thread or task: its deadline and what it read."""

    deadline: float
    max_bytes: int
    seconds: float
    stop: threading.Event | None
    read: int = 0

    def left(self) -> float:
        if self.stop is not None and self.stop.is_set():
            raise CallInterrupted("the conversation was stopped while waiting for the model")
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(
                f"no complete answer within {self.seconds:g} s", received=self.read
            )
        return left

    def count(self, size: int) -> None:
        self.read += size
        if self.read > self.max_bytes:
            raise ReplyTooLarge(
                f"the answer passed {_size(self.max_bytes)} (TAU2_LLM_MAX_REPLY_BYTES) and "
                "was not read further"
            )


def _size(n: int) -> str:
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    return f"{n:,} bytes"


_current: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "tau2_outbound_call", default=None
)
_stop: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "tau2_outbound_stop", default=None
)


@contextmanager
def interruptible(stop: threading.Event) -> Iterator[None]:
    """Within the block, a request waiting for its answer ends (:class:`CallInterrupted`)
    within about :data:`POLL_SECONDS` of ``stop`` being set."""
    token = _stop.set(stop)
    try:
        yield
    finally:
        _stop.reset(token)


def pause(seconds: float) -> bool:
    """Wait ``seconds`` (between two attempts of a call), or less if the conversation is
    stopped meanwhile (:func:`interruptible`); returns False when it was."""
    stop = _stop.get()
    if stop is None:
        time.sleep(seconds)
        return True
    return not stop.wait(seconds)


@contextmanager
def bounded(seconds: float, *, max_bytes: int | None = None) -> Iterator[_Call]:
    """One request's bounds: within the block its connection, reads and whole answer
    end by ``seconds`` from now, and it reads at most ``max_bytes`` (default
    ``TAU2_LLM_MAX_REPLY_BYTES``)."""
    call = _Call(
        deadline=time.monotonic() + seconds,
        max_bytes=max_bytes if max_bytes is not None else config.llm_max_reply_bytes(),
        seconds=seconds,
        stop=_stop.get(),
    )
    token = _current.set(call)
    try:
        yield call
    finally:
        _current.reset(token)


def _within(timeout: float | None) -> float | None:
    """``timeout`` shortened to what the current call has left (raises past it)."""
    call = _current.get()
    if call is None:
        return timeout
    left = call.left()
    return left if timeout is None else min(timeout, left)


_T = TypeVar("_T", bytes, int)


def read_within(
    read: Callable[[float | None], _T],
    timeout: float | None,
    *,
    timed_out: type[BaseException] | tuple[type[BaseException], ...],
) -> _T:
    """``read(t)`` as one read of ``timeout`` seconds, in slices of at most
    :data:`POLL_SECONDS` so that the current call's deadline, size cap and stop are
    looked at while it waits. ``read`` returns bytes, or a count of bytes read;
    ``timed_out`` is what it raises when a slice passes with nothing to read."""
    call = _current.get()
    if call is None:
        return read(timeout)
    started = time.monotonic()
    while True:
        left = call.left()
        wait = min(left, POLL_SECONDS)
        if timeout is not None:
            wait = min(wait, max(started + timeout - time.monotonic(), 0.0))
        try:
            got = read(max(wait, 0.001))
        except timed_out:
            if timeout is not None and time.monotonic() - started >= timeout:
                raise
            continue
        call.count(got if isinstance(got, int) else len(got))
        return got


def decode(body: bytes, encoding: str, *, max_bytes: int) -> bytes:
    """``body`` decoded from its content encoding (gzip, deflate, br, identity), at most
    ``max_bytes`` of it: a small compressed answer that would decompress past the cap
    raises :class:`ReplyTooLarge`. ``ValueError`` for an encoding it does not know."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        decoded = body
    elif encoding in ("gzip", "x-gzip", "deflate"):
        wbits = 16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS
        try:
            decoder = zlib.decompressobj(wbits)
            decoded = decoder.decompress(body, max_bytes + 1)
        except zlib.error:
            if encoding != "deflate":
                raise
            decoder = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, as some send it
            decoded = decoder.decompress(body, max_bytes + 1)
    elif encoding == "br":
        import brotli  # only where httpx asks for brotli: it is installed then

        decompressor = brotli.Decompressor()
        decoded = decompressor.process(body[: max_bytes + 1]) if body else b""
    else:
        raise ValueError(f"unsupported content encoding {encoding!r}")
    if len(decoded) > max_bytes:
        raise ReplyTooLarge(
            f"the answer decompressed past {_size(max_bytes)} (TAU2_LLM_MAX_REPLY_BYTES) and "
            "was not read further"
        )
    return decoded


# --------------------------------------------------------------------- httpx


class _Stream(httpcore.NetworkStream):
    """httpcore's socket stream, its reads and writes held to the current call's bounds."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return read_within(
            lambda t: self._inner.read(max_bytes, t), timeout, timed_out=httpcore.ReadTimeout
        )

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _within(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> _Stream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, _within(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's sockets, connected only to addresses the policy allows."""

    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        try:
            infos = resolve(host, port)
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"{host} could not be found: {exc}") from exc
        last: Exception | None = None
        for info in infos:
            try:
                stream = self._inner.connect_tcp(
                    info[4][0], port, _within(timeout), local_address, socket_options
                )
            except httpcore.ConnectError as exc:
                last = exc
                continue
            return _Stream(stream)
        raise last or httpcore.ConnectError(f"no address for {host}")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise DestinationRefused("the server does not call Unix sockets for an endpoint")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


# httpcore's failures as httpx raises them (subclasses first); ours keep their words.
_MAPPED: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def as_httpx(exc: BaseException, request: httpx.Request | None = None) -> BaseException:
    """The httpx exception httpx raises for httpcore's ``exc`` (ours too: same words,
    ``exc`` as its cause); anything else as it is."""
    for theirs, ours in _MAPPED:
        if isinstance(exc, theirs):
            mapped = ours(str(exc), request=request)
            mapped.__cause__ = exc
            return mapped
    return exc


# What sends a request on the transport, and what may stand between (the direct path's
# check of what litellm sends: tau2_env.llm.compat).
Send = Callable[[httpx.Request], httpx.Response]
_observer: Callable[[httpx.Request, Send], httpx.Response] | None = None


def set_request_observer(observer: Callable[[httpx.Request, Send], httpx.Response] | None) -> None:
    """Every request :class:`Transport` sends goes through ``observer(request, send)``
    (which calls ``send(request)``, or answers itself); ``None`` removes it."""
    global _observer
    _observer = observer


class Transport(httpx.BaseTransport):
    """httpx's transport for model endpoints: the policy's destinations, one deadline
    per request (the request's own timeout, for the whole answer), the answer read
    whole up to the size cap and decoded within it."""

    def __init__(self, *, keep: int = 512) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=None,
            max_keepalive_connections=keep,
            keepalive_expiry=5.0,
            network_backend=_Backend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        observer = _observer
        if observer is not None:
            return observer(request, self._send)
        return self._send(request)

    def _send(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout") or {}
        seconds = max((t for t in timeouts.values() if t is not None), default=None)
        with bounded(seconds if seconds is not None else config.llm_timeout()) as call:
            try:
                return self._exchange(request, call)
            except Exception as exc:
                raise as_httpx(exc, request) from exc

    def _exchange(self, request: httpx.Request, call: _Call) -> httpx.Response:
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        response = self._pool.handle_request(core)
        try:
            length = _content_length(response.headers)
            if length is not None and length > call.max_bytes:
                raise ReplyTooLarge(
                    f"the answer is {length:,} bytes, past {_size(call.max_bytes)} "
                    "(TAU2_LLM_MAX_REPLY_BYTES): not read"
                )
            body = b"".join(response.iter_stream())
        finally:
            response.close()
        headers = [
            (name, value)
            for name, value in response.headers
            if name.lower() not in (b"content-encoding", b"content-length", b"transfer-encoding")
        ]
        encoding = next(
            (v.decode("latin-1") for k, v in response.headers if k.lower() == b"content-encoding"),
            "",
        )
        try:
            content = decode(body, encoding, max_bytes=call.max_bytes)
        except (zlib.error, ValueError, OSError) as exc:
            raise httpcore.RemoteProtocolError(f"the answer could not be decoded: {exc}") from exc
        return httpx.Response(
            status_code=response.status,
            headers=headers,
            content=content,
            extensions={
                k: v
                for k, v in response.extensions.items()
                if k in ("http_version", "reason_phrase")
            },
            request=request,
        )

    def close(self) -> None:
        self._pool.close()


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


@dataclass
class _Clients:
    lock: threading.Lock = field(default_factory=threading.Lock)
    client: httpx.Client | None = None


_clients = _Clients()


def client() -> httpx.Client:
    """The process's one ``httpx.Client`` for model endpoints: :class:`Transport`, no
    redirects followed, no cookies kept, no proxy or settings from the environment."""
    with _clients.lock:
        if _clients.client is None or _clients.client.is_closed:
            _clients.client = httpx.Client(
                transport=Transport(),
                follow_redirects=False,
                trust_env=False,
                # One client serves every person's endpoints: none keeps a cookie.
                cookies=http.cookiejar.CookieJar(
                    policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[])
                ),
            )
        return _clients.client

"""A small keep-alive HTTP/1.1 client for requests whose bytes are already built.

:mod:`tau2_env.llm.compat`'s direct path sends the customer's (and τ²'s agent's) chat calls
with the exact bytes litellm would send: the body and headers are built elsewhere and
checked against litellm's own; this module only carries them. It is the standard
library's ``http.client`` with a pool of idle connections per origin, because httpx and
the OpenAI SDK around it cost more CPU per call than everything else in a customer's
turn (``bench/llm_call.py``).

* Headers go out in the order given and nothing is added: ``http.client``'s ``Host``
  and ``Accept-Encoding`` are suppressed (the caller's are sent), ``Content-Length`` is
  the caller's too.
* A connection that the server closed while idle is noticed before reuse (readable
  with nothing to read: EOF), as urllib3 does, and dropped; a reused connection that
  fails before any byte of the answer is tried once more on a new one.
* A gzip, deflate or brotli answer is decoded; any other encoding is an error.
* HTTPS verifies certificates as httpx does: against ``SSL_CERT_FILE``, else
  ``SSL_CERT_DIR``, else ``certifi``'s bundle.

Failures raise :class:`WireError`; the caller decides what to do (the direct path
hands the call to litellm, which reports it as it always has).
"""

from __future__ import annotations

import http.client
import os
import select
import socket
import ssl
import threading
import zlib
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

import certifi

from tau2_env.llm import outbound

__all__ = ["Answer", "Pool", "WireError"]

# Idle connections kept per origin: enough for a 256-episode batch's customers.
KEEP_PER_ORIGIN = 256


class WireError(RuntimeError):
    """The request could not be made or its answer could not be read; ``cause`` is what
    the socket or ``http.client`` raised (None for an answer that could not be decoded)."""

    def __init__(self, message: str, *, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, headers (lower-case names, as received) and the body,
    decoded from its content encoding."""

    status: int
    headers: dict[str, str]
    body: bytes


def _tls() -> ssl.SSLContext:
    """The certificates httpx trusts: ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else
    certifi's bundle."""
    return _tls_for(os.environ.get("SSL_CERT_FILE") or "", os.environ.get("SSL_CERT_DIR") or "")


@cache
def _tls_for(cafile: str, capath: str) -> ssl.SSLContext:
    if cafile:
        context = ssl.create_default_context(cafile=cafile)
    elif capath:
        context = ssl.create_default_context(capath=capath)
    else:
        context = ssl.create_default_context(cafile=certifi.where())
    context.sslsocket_class = _TLSSocket
    return context


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """True when an idle connection's socket is closed (or has unexpected bytes)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class _Socket(socket.socket):
    """A socket whose reads keep to the current call's deadline, size cap and stop
    (:func:`tau2_env.llm.outbound.read_within`)."""

    def recv_into(self, buffer, nbytes=0, flags=0):
        def read() -> int:
            return socket.socket.recv_into(self, buffer, nbytes, flags)

        return outbound.read_within(
            lambda t: _read_for(self, t, read), self.gettimeout(), timed_out=TimeoutError
        )


class _TLSSocket(ssl.SSLSocket):
    """:class:`_Socket`'s reads over TLS."""

    def recv_into(self, buffer, nbytes=None, flags=0):
        def read() -> int:
            return ssl.SSLSocket.recv_into(self, buffer, nbytes, flags)

        return outbound.read_within(
            lambda t: _read_for(self, t, read), self.gettimeout(), timed_out=TimeoutError
        )


def _read_for(sock: socket.socket, seconds: float | None, read):
    """``read()`` with the socket's timeout set to ``seconds`` meanwhile."""
    was = sock.gettimeout()
    sock.settimeout(seconds)
    try:
        return read()
    finally:
        sock.settimeout(was)


class _HTTPConnection(http.client.HTTPConnection):
    """http.client's connection, connected where the outbound policy allows."""

    def connect(self) -> None:
        self.sock = outbound.connect(self.host, self.port, timeout=self.timeout, sock_class=_Socket)


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context

    def connect(self) -> None:
        sock = outbound.connect(self.host, self.port, timeout=self.timeout, sock_class=_Socket)
        try:
            self.sock = self._tls_context.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


class Pool:
    """Keep-alive connections per origin, shared by threads (each connection is used by
    one request at a time)."""

    def __init__(self, *, keep_per_origin: int = KEEP_PER_ORIGIN) -> None:
        self._keep = keep_per_origin
        self._idle: defaultdict[tuple[str, str, int], list[http.client.HTTPConnection]] = (
            defaultdict(list)
        )
        self._lock = threading.Lock()

    def post(
        self, url: str, *, headers: list[tuple[str, str]], body: bytes, timeout: float
    ) -> Answer:
        """POST ``body`` to ``url`` with exactly ``headers``; the decoded answer."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WireError(f"cannot send to {parts.scheme!r} URLs")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        origin = (parts.scheme, parts.hostname, port)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        with outbound.bounded(timeout) as call:
            return self._post(origin, target, headers, body, timeout, call.max_bytes)

    def _post(self, origin, target, headers, body, timeout, max_bytes) -> Answer:
        for attempt in (0, 1):
            conn, reused = self._take(origin, timeout)
            try:
                answer, keep = self._exchange(conn, target, headers, body, max_bytes)
            except outbound.OutboundError as exc:
                conn.close()
                raise WireError(str(exc), cause=exc) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                # A kept connection the server dropped meanwhile: once more on a new one.
                if reused and attempt == 0 and _before_answer(exc):
                    continue
                raise WireError(f"{type(exc).__name__}: {exc}", cause=exc) from None
            except BaseException:
                conn.close()
                raise
            if keep:
                self._give_back(origin, conn)
            else:
                conn.close()
            return answer
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle = [conn for conns in self._idle.values() for conn in conns]
            self._idle.clear()
        for conn in idle:
            conn.close()

    # ------------------------------------------------------------------ internals

    def _take(
        self, origin: tuple[str, str, int], timeout: float
    ) -> tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                idle = self._idle.get(origin)
                conn = idle.pop() if idle else None
            if conn is None:
                break
            if _dropped(conn):
                conn.close()
                continue
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        scheme, host, port = origin
        if scheme == "https":
            return _HTTPSConnection(host, port, timeout=timeout, context=_tls()), False
        return _HTTPConnection(host, port, timeout=timeout), False

    def _give_back(self, origin: tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle[origin]
            if len(idle) < self._keep:
                idle.append(conn)
                return
        conn.close()

    @staticmethod
    def _exchange(
        conn: http.client.HTTPConnection,
        target: str,
        headers: list[tuple[str, str]],
        body: bytes,
        max_bytes: int,
    ) -> tuple[Answer, bool]:
        if conn.sock is None:
            conn.connect()
            assert conn.sock is not None  # connect() opened it
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.putrequest("POST", target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders(message_body=body)
        response = conn.getresponse()
        if response.length is not None and response.length > max_bytes:
            # http.client would make room for the whole of it before reading a byte.
            raise outbound.ReplyTooLarge(
                f"the answer is {response.length:,} bytes, past the cap of {max_bytes:,} "
                "(TAU2_LLM_MAX_REPLY_BYTES): not read"
            )
        raw = response.read()
        received = {name.lower(): value for name, value in response.getheaders()}
        keep = not response.will_close
        try:
            encoding = received.get("content-encoding", "")
            decoded = outbound.decode(raw, encoding, max_bytes=max_bytes)
        except (zlib.error, OSError, ValueError) as exc:
            raise WireError(f"the answer could not be decoded: {exc}") from None
        return Answer(status=response.status, headers=received, body=decoded), keep


def _before_answer(exc: BaseException) -> bool:
    """Whether a failure on a reused connection happened before the server answered
    anything (so the request was not processed): the server had closed it."""
    return isinstance(
        exc,
        http.client.RemoteDisconnected
        | http.client.BadStatusLine
        | BrokenPipeError
        | ConnectionResetError
        | ConnectionAbortedError,
    )

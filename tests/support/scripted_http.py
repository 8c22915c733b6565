"""What every local stand-in server of the tests shares: a threaded HTTP server on a
free local port (:class:`LocalServer`), a script of replies (or a responder that
decides), the requests it received, and a quiet JSON request handler.

:mod:`tests.support.llm_server` (OpenAI-compatible, HF router) and
:mod:`tests.support.anthropic_server` (Anthropic's Messages API) speak their providers'
wire formats on top of this; only the formats differ.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar

__all__ = ["JSONHandler", "LocalServer", "ScriptedServer"]

R = TypeVar("R")  # a scripted reply
Q = TypeVar("Q")  # a recorded request


class LocalServer:
    """A threaded HTTP server on ``127.0.0.1:<free port>``, served from a daemon thread:
    :meth:`start`, :meth:`stop`, :attr:`port`. A subclass gives :meth:`_handler` (the
    request handler class) and sets ``self._server = None`` before starting."""

    thread_name = "local-server"
    _server: ThreadingHTTPServer | None

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return self._server.server_address[1]

    def start(self):
        """Serve on ``127.0.0.1:<free port>`` from a daemon thread; returns ``self``."""
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, name=self.thread_name, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError


class ScriptedServer(LocalServer, Generic[R, Q]):
    """A server answering from :attr:`script` in order, or from :attr:`responder` when set
    (it may return a ``str`` or a reply). With neither, :meth:`_no_reply` answers — an
    error, so a test never silently gets an answer it did not plan.

    Subclasses give :meth:`_handler` (the request handler class), :meth:`_as_reply` (a
    ``str`` made a reply) and :meth:`_no_reply`.
    """

    thread_name = "scripted-server"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.script: deque[R | str] = deque()
        self.responder: Callable[[Q], R | str] | None = None
        self.requests: list[Q] = []
        self._server: ThreadingHTTPServer | None = None

    def reset(self) -> None:
        """Forget the script, the responder and the recorded requests."""
        with self._lock:
            self.script.clear()
            self.responder = None
            self.requests.clear()

    def add(self, *replies: R | str) -> None:
        """Append replies to the script."""
        with self._lock:
            self.script.extend(replies)

    def _record(self, request: Q) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_reply(self, request: Q) -> R:
        with self._lock:
            responder = self.responder
            scripted = self.script.popleft() if (responder is None and self.script) else None
        if responder is not None:
            reply = responder(request)
        elif scripted is not None:
            reply = scripted
        else:
            return self._no_reply()
        return self._as_reply(reply) if isinstance(reply, str) else reply

    # ------------------------------------------------------- for subclasses

    def _as_reply(self, content: str) -> R:
        raise NotImplementedError

    def _no_reply(self) -> R:
        raise NotImplementedError


class JSONHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers JSON (or any bytes) in one go."""

    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle's algorithm on, the body
    # waits for the client's delayed ACK: 40 ms added to every scripted call.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in {**self._extra_headers(), **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _extra_headers(self) -> dict[str, str]:
        """Headers every answer carries besides the type and length (a provider's ids)."""
        return {}

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _read_raw(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    @staticmethod
    def _parsed(raw: bytes) -> dict[str, Any]:
        """The body as JSON; an unparsable one as ``{"_raw": its text}``."""
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return {"_raw": raw.decode(errors="replace")}

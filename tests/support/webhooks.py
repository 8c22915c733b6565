"""A webhook receiver for the notifications tests: a local HTTP server (a thread of the
test) that records every POST — headers and raw body — and answers as told: ``ok``
(204), an HTTP ``status``, or ``hang`` (reads the request, then answers nothing until
released). :meth:`WebhookReceiver.stop` and :meth:`WebhookReceiver.start` on the same port
make it "down" (connection refused) and "up" again.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.scripted_http import JSONHandler, LocalServer

__all__ = ["Received", "WebhookReceiver"]


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]  # names lower-cased
    body: bytes
    at: float  # time.monotonic()


class WebhookReceiver(LocalServer):
    thread_name = "webhook-receiver"

    def __init__(self, *, port: int = 0) -> None:
        self._server = None
        self._port = port
        self._lock = threading.Lock()
        self.received: list[Received] = []
        self.answer: str | int = "ok"  # "ok", "hang" or an HTTP status
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/hooks/tau2?token=CANARY-URL-TOKEN"

    def start(self):
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), self._handler())
        self._server.daemon_threads = True
        self._port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, name=self.thread_name, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        self.released.set()
        super().stop()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_for(self, count: int, *, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.received) >= count:
                    return list(self.received)
            time.sleep(0.05)
        raise AssertionError(f"{len(self.received)} webhook(s) received, not {count}")

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self._read_raw()
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.received.append(Received(headers, body, time.monotonic()))
                    answer = receiver.answer
                if answer == "hang":
                    receiver.released.wait(60)
                    return
                status = 204 if answer == "ok" else int(answer)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler

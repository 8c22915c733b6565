"""A model endpoint that misbehaves on purpose, for the outbound policy's tests.

One raw TCP server on ``127.0.0.1``: every request is answered by the :class:`Behaviour`
set at the time, written byte by byte as the test wants (``http.server`` would not let
a test trickle a status line or lie about a length). It counts the requests it read and
the bytes it managed to send, so a test can tell that an answer was *not* read whole.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from dataclasses import dataclass

__all__ = ["Behaviour", "HostileEndpoint"]


@dataclass(frozen=True)
class Behaviour:
    """What the endpoint does with a request.

    ``kind``: ``json`` (a 200 with ``payload``), ``silent`` (reads the request, answers
    nothing), ``trickle`` (a status line and headers,
    then one byte every ``interval`` seconds, for ever), ``huge`` (a 200 claiming
    ``size`` bytes and sending them, chunked when ``chunked``), ``gzip_bomb`` (``size``
    bytes of JSON-ish zeros gzipped), ``redirect`` (a 307 to ``location``).
    """

    kind: str
    payload: object = None
    interval: float = 0.5
    size: int = 0
    chunked: bool = False
    location: str = ""


class HostileEndpoint:
    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.behaviour = Behaviour("json", payload={})
        self.requests = 0
        self.bytes_sent = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="hostile-endpoint").start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self._closed.set()
        # Wakes the accepting thread: a socket closed under a blocked accept() would go
        # on listening until it returned.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

    def __enter__(self) -> HostileEndpoint:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ serving

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn:
                conn.settimeout(30)
                if not self._read_request(conn):
                    return
                with self._lock:
                    self.requests += 1
                self._answer(conn, self.behaviour)
        except OSError:
            return

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                return False
            body += chunk
        return True

    def _send(self, conn: socket.socket, data: bytes) -> None:
        conn.sendall(data)
        with self._lock:
            self.bytes_sent += len(data)

    def _answer(self, conn: socket.socket, b: Behaviour) -> None:
        if b.kind == "json":
            body = json.dumps(b.payload).encode()
            self._send(conn, _head(200, {"Content-Type": "application/json",
                                         "Content-Length": str(len(body))}) + body)  # fmt: skip
        elif b.kind == "silent":
            self._closed.wait(60)
        elif b.kind == "redirect":
            self._send(conn, _head(307, {"Location": b.location, "Content-Length": "0"}))
        elif b.kind == "trickle":
            self._send(conn, _head(200, {"Content-Type": "application/json",
                                         "Content-Length": "1000000"}))  # fmt: skip
            while not self._closed.is_set():
                self._send(conn, b" ")
                time.sleep(b.interval)
        elif b.kind == "huge":
            headers = {"Content-Type": "application/json"}
            if b.chunked:
                headers["Transfer-Encoding"] = "chunked"
            else:
                headers["Content-Length"] = str(b.size)
            self._send(conn, _head(200, headers))
            block = b'{"x": "' + b"a" * 65000 + b'"}\n'
            sent = 0
            while sent < b.size:
                piece = block[: b.size - sent]
                self._send(conn, f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                           if b.chunked else piece)  # fmt: skip
                sent += len(piece)
            if b.chunked:
                self._send(conn, b"0\r\n\r\n")
        elif b.kind == "gzip_bomb":
            body = gzip.compress(b" " * b.size, compresslevel=9)
            self._send(conn, _head(200, {"Content-Type": "application/json",
                                         "Content-Encoding": "gzip",
                                         "Content-Length": str(len(body))}) + body)  # fmt: skip
        else:
            raise ValueError(b.kind)


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()

"""The direct path's HTTP client (``tau2_env.llm.wire``): exact headers, kept connections,
connections the server dropped, encoded and chunked answers, failures as WireError."""

from __future__ import annotations

import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler

import pytest

from tau2_env.llm import wire
from tests.support.scripted_http import LocalServer


class EchoServer(LocalServer):
    """Answers every POST with what it received; ``mode`` says how."""

    thread_name = "wire-server"

    def __init__(self) -> None:
        self._server = None
        self.mode = "keep"  # keep | close-silently | gzip | chunked
        self.received: list[tuple[list[tuple[str, str]], bytes, int]] = []
        self.lock = threading.Lock()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with server.lock:
                    server.received.append(
                        (list(self.headers.items()), body, self.client_address[1])
                    )
                answer = b'{"echo": ' + str(len(body)).encode() + b"}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if server.mode == "gzip":
                    answer = gzip.compress(answer)
                    self.send_header("Content-Encoding", "gzip")
                if server.mode == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for piece in (answer[:5], answer[5:]):
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)
                if server.mode == "close-silently":
                    # Closed after answering, without saying so: the client keeps it.
                    self.close_connection = True

        return Handler


@pytest.fixture
def server():
    running = EchoServer().start()
    yield running
    running.stop()


def _post(pool: wire.Pool, server: EchoServer, body: bytes = b'{"a":1}') -> wire.Answer:
    headers = [
        ("Host", f"127.0.0.1:{server.port}"),
        ("Accept-Encoding", "gzip, deflate"),
        ("x-custom", "One"),
        ("Content-Length", str(len(body))),
    ]
    return pool.post(
        f"http://127.0.0.1:{server.port}/v1/chat/completions?x=1",
        headers=headers,
        body=body,
        timeout=5,
    )


def test_the_headers_go_out_as_given_and_the_connection_is_kept(server):
    pool = wire.Pool()
    first = _post(pool, server)
    second = _post(pool, server, b'{"a":22}')
    assert first == wire.Answer(
        status=200,
        headers={
            "server": first.headers["server"],
            "date": first.headers["date"],
            "content-type": "application/json",
            "content-length": "11",
        },  # fmt: skip
        body=b'{"echo": 7}',
    )
    assert second.body == b'{"echo": 8}'
    (headers, body, conn_a), (_, _, conn_b) = server.received
    assert [name for name, _ in headers] == [
        "Host",
        "Accept-Encoding",
        "x-custom",
        "Content-Length",
    ]
    assert body == b'{"a":1}'
    assert conn_a == conn_b  # one connection, kept
    pool.close()


def test_a_connection_the_server_closed_while_idle_is_not_reused(server):
    server.mode = "close-silently"
    pool = wire.Pool()
    answers = [_post(pool, server) for _ in range(3)]
    assert [a.body for a in answers] == [b'{"echo": 7}'] * 3
    assert len({conn for _, _, conn in server.received}) == 3


def test_gzip_and_chunked_answers_are_read(server):
    pool = wire.Pool()
    server.mode = "gzip"
    assert _post(pool, server).body == b'{"echo": 7}'
    server.mode = "chunked"
    assert _post(pool, server).body == b'{"echo": 7}'


def test_a_server_that_is_not_there_is_a_wire_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(wire.WireError, match="ConnectionRefused"):
        wire.Pool().post(f"http://127.0.0.1:{port}/", headers=[], body=b"", timeout=2)
    with pytest.raises(wire.WireError, match="cannot send"):
        wire.Pool().post("ftp://127.0.0.1/", headers=[], body=b"", timeout=2)

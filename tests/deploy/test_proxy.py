"""The front proxy's configuration (deploy/nginx) on Debian's nginx, in front of two echo
servers standing for web and openenv: which path goes where, the forwarded headers the
backends get, HTTPS on a mounted certificate, and the body limits.

The whole product behind the same configuration: tests/deploy/test_production_layout.py.
"""

from __future__ import annotations

import ast
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.support import proxy as front

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(front.missing() is not None, reason=str(front.missing()))


class _Echo(BaseHTTPRequestHandler):
    """Answers every request with JSON: which upstream it is, the path and the headers."""

    server: _EchoServer

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        body = json.dumps(
            {
                "upstream": self.server.name,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body_bytes": length,
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


class _EchoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, name: str) -> None:
        super().__init__(("127.0.0.1", 0), _Echo)
        self.name = name

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"


@dataclass
class Proxies:
    plain: front.Proxy  # no certificate: HTTP routes
    tls: front.Proxy  # a mounted certificate: HTTPS routes, HTTP redirects
    cert: Path


@pytest.fixture(scope="module")
def proxies(tmp_path_factory) -> Iterator[Proxies]:
    servers = [_EchoServer("web"), _EchoServer("openenv")]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    web, openenv = (s.address for s in servers)
    tmp = tmp_path_factory.mktemp("proxy")
    certs = front.self_signed(tmp / "certs")
    plain = front.start_proxy(tmp / "plain", web=web, openenv=openenv)
    tls = front.start_proxy(tmp / "tls", web=web, openenv=openenv, certs=certs)
    try:
        yield Proxies(plain=plain, tls=tls, cert=certs / "fullchain.pem")
    finally:
        plain.stop()
        tls.stop()
        for server in servers:
            server.shutdown()
            server.server_close()


AGENT_FACES = [
    # tau2site/asgi.py's OPENENV_PATHS, with and without a trailing slash, with a query
    "/ws",
    "/ws?session_id=abc",
    "/reset",
    "/step/",
    "/state",
    "/schema",
    "/metadata",
    "/health",
    "/mcp",
    "/mcp/",
    "/openapi.json",
    "/docs",
    # its OPENENV_PREFIXES (the Task API) and the MCP server for agents
    "/tau2/splits",
    "/tau2_env/tasks",
    "/tau2-env/splits",
    "/list_environments",
    "/agent/mcp",
    "/agent/mcp/?domain=airline&seed=7",
]
PAGES = [
    "/",
    "/agents/",
    "/accounts/keys/",
    "/runs/12/",
    "/ws/runs/12/",  # the live pages' sockets: Channels, on web
    "/ws/play/3/",
    "/docs/agents/",
    "/healthz",
    "/mcpx",
    "/static/css/site.css",
    "/health/workers",
]


def _faces_of_the_asgi_app() -> set[str]:
    """Every path and prefix tau2site/asgi.py sends to an agent face (read from its source:
    importing it would build the whole application)."""
    tree = ast.parse((ROOT / "tau2site" / "asgi.py").read_text(encoding="utf-8"))
    names = {"OPENENV_PATHS", "OPENENV_PREFIXES", "MCP_AGENT_PATH"}
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and {getattr(t, "id", "") for t in node.targets} & names:
            found |= {
                n.value
                for n in ast.walk(node.value)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            }
    return found


def test_the_list_above_is_every_face_the_asgi_app_routes():
    listed = {path.partition("?")[0].rstrip("/") for path in AGENT_FACES}
    faces = _faces_of_the_asgi_app()

    assert {"/ws", "/mcp", "/agent/mcp", "/tau2/"} <= faces
    for face in faces:
        assert face.rstrip("/") in listed or any(p.startswith(face) for p in listed), face


@pytest.mark.parametrize("path", AGENT_FACES)
def test_the_agent_faces_go_to_openenv(proxies, path):
    answer = httpx.get(proxies.plain.url + path, timeout=10)

    assert answer.json()["upstream"] == "openenv"
    assert answer.json()["path"] == path  # as the client wrote it


@pytest.mark.parametrize("path", PAGES)
def test_pages_and_live_sockets_go_to_web(proxies, path):
    assert httpx.get(proxies.plain.url + path, timeout=10).json()["upstream"] == "web"


def test_the_forwarded_headers_are_the_proxys_own(proxies):
    lies = {
        "X-Forwarded-For": "6.6.6.6",
        "X-Real-IP": "6.6.6.6",
        "Forwarded": "for=6.6.6.6;proto=https",
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Proto": "https",
        "X-Forwarded-Port": "443",
    }
    for path in ("/agents/", "/mcp"):
        headers = httpx.get(proxies.plain.url + path, headers=lies, timeout=10).json()["headers"]

        # Overwritten, not appended: the backends see the proxy's peer and scheme only.
        assert headers["x-forwarded-for"] == "127.0.0.1", path
        assert headers["x-forwarded-proto"] == "http", path
        for dropped in ("x-real-ip", "forwarded", "x-forwarded-host", "x-forwarded-port"):
            assert dropped not in headers, (path, dropped)
        # The Host as the client wrote it (with its port): Django's ALLOWED_HOSTS and the
        # URLs the pages print.
        assert headers["host"] == proxies.plain.url.removeprefix("http://"), path


def test_a_mounted_certificate_serves_https_and_http_redirects_to_it(proxies):
    for path, upstream in (("/agents/", "web"), ("/agent/mcp", "openenv")):
        answer = httpx.get(proxies.tls.tls_url + path, verify=str(proxies.cert), timeout=10)

        assert answer.json()["upstream"] == upstream
        assert answer.json()["headers"]["x-forwarded-proto"] == "https"

    redirect = httpx.post(proxies.tls.url + "/mcp?x=1", json={}, timeout=10)
    assert redirect.status_code == 308  # a POST stays a POST
    assert redirect.headers["location"] == "https://127.0.0.1/mcp?x=1"


def test_an_agent_faces_body_is_bounded_lower_than_a_pages(proxies):
    body = b"x" * (3 * 1024 * 1024)  # above TAU2_PROXY_AGENT_MAX_BODY (2m), below 64m

    refused = httpx.post(proxies.plain.url + "/mcp", content=body, timeout=30)
    upload = httpx.post(proxies.plain.url + "/evaluations/upload/", content=body, timeout=30)

    assert refused.status_code == 413
    assert upload.json() == {**upload.json(), "upstream": "web", "body_bytes": len(body)}

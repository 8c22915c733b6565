"""What a client cannot make ``python -m tau2_env.gate.session_router`` do: forget another's
session, or choose the address the processes see.

Two scripted OpenEnv processes (:mod:`tests.support.router_backend`, which keep MCP
sessions as the real ones do and echo what reached them) behind the router, started as
a deployment starts it, with one trusted proxy: 127.0.0.2, a loopback address of its
own. alice and bob are clients of the router (127.0.0.1); the proxy connects from
127.0.0.2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from tau2_env.gate.session_router import TrustedProxies, _Head
from tests.support.processes import Process, start_router, stop, wait_until_up

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.support.router_backend:app"
PROXY = "127.0.0.2"
ALICE = {"Authorization": "Bearer alice"}
BOB = {"Authorization": "Bearer bob"}
# What a client claims to be: an address it does not have, in every header that says one,
# a scheme it did not use (TLS, where it spoke plain HTTP), and a host, port and prefix.
SPOOFED = {
    "X-Forwarded-For": "203.0.113.66",
    "X-Real-IP": "203.0.113.67",
    "Forwarded": "for=203.0.113.68;proto=https",
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "bank.example",
    "X-Forwarded-Port": "443",
    "X-Forwarded-Prefix": "/evil",
}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "FORWARDED_ALLOW_IPS"}
    env.update(PYTHONPATH=str(ROOT), **extra)
    return env


@pytest.fixture(scope="module")
def router() -> Iterator[Process]:
    # A shared .env may hold uvicorn's own FORWARDED_ALLOW_IPS=* (for web): the router
    # neither takes it as its trusted proxies nor lets its processes trust it.
    server = start_router(_env(TAU2_ROUTER_TRUSTED_PROXIES=PROXY, FORWARDED_ALLOW_IPS="*"), app=APP)
    try:
        wait_until_up(server, timeout=120)
        yield server
    finally:
        stop(server)


def _client(*, local_address: str = "127.0.0.1") -> httpx.Client:
    """A client on a connection of its own per request, from ``local_address``."""
    transport = httpx.HTTPTransport(local_address=local_address)
    return httpx.Client(transport=transport, timeout=30, headers={"Connection": "close"})


def test_a_strangers_refused_delete_leaves_her_mcp_session_where_it_is(router):
    url = f"{router.url}/agent/mcp"
    with _client() as http:
        opened = http.post(url, headers=ALICE, json={})
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        process = opened.headers["x-tau2-process"]

        failed = []
        for _ in range(3):
            refused = http.delete(url, headers={**BOB, **session})
            assert refused.status_code == 404
            assert refused.headers["x-tau2-process"] == process
            for _ in range(2):
                answer = http.post(url, headers={**ALICE, **session}, json={})
                if answer.status_code != 200:
                    failed.append(answer.json())
                assert answer.headers["x-tau2-process"] == process
        assert failed == []

        closed = http.delete(url, headers={**ALICE, **session})
        assert closed.status_code == 200
        assert closed.headers["x-tau2-process"] == process
        # Closed where it was held, the route is gone: her next calls land anywhere.
        after = [http.post(url, headers={**ALICE, **session}, json={}) for _ in range(2)]
        assert [a.status_code for a in after] == [404, 404]
        assert {a.headers["x-tau2-process"] for a in after} == {"0", "1"}


def test_a_clients_own_forwarded_address_never_reaches_the_processes(router):
    with _client() as http:
        answers = [http.get(f"{router.url}/echo", headers=SPOOFED).json() for _ in range(2)]
    assert {a["process"] for a in answers} == {"0", "1"}
    for echoed in answers:
        assert echoed == {
            "client": "127.0.0.1",
            "scheme": "http",
            "x-forwarded-for": ["127.0.0.1"],
            "x-forwarded-proto": ["http"],
            "process": echoed["process"],
        }


async def test_a_websockets_own_forwarded_address_never_reaches_the_processes(router):
    async with connect(router.ws_url("/echo"), additional_headers=SPOOFED) as ws:
        echoed = json.loads(await ws.recv())
    assert echoed == {
        "client": "127.0.0.1",
        "scheme": "ws",
        "x-forwarded-for": ["127.0.0.1"],
        "x-forwarded-proto": ["http"],
    }


def test_the_trusted_proxy_names_the_client_and_nothing_the_client_wrote_passes(router):
    # The proxy appends the address it saw to what the client sent (nginx's
    # $proxy_add_x_forwarded_for): the client's own part is on the left.
    headers = {**SPOOFED, "X-Forwarded-For": "203.0.113.66, 198.51.100.7"}
    with _client(local_address=PROXY) as http:
        echoed = http.get(f"{router.url}/echo", headers=headers).json()
        alone = http.get(f"{router.url}/echo", headers={"X-Real-IP": "198.51.100.8"}).json()
    assert echoed["client"] == "198.51.100.7"
    assert echoed["x-forwarded-for"] == ["198.51.100.7"]
    assert "x-real-ip" not in echoed
    assert "forwarded" not in echoed
    assert alone["client"] == "198.51.100.8"
    # The proxy ended TLS: its X-Forwarded-Proto is the scheme, and its other X-Forwarded-*
    # pass (nginx here sends none; the router takes a trusted proxy's word on them).
    assert echoed["scheme"] == "https" and echoed["x-forwarded-proto"] == ["https"]
    assert echoed["x-forwarded-host"] == ["bank.example"]
    assert (alone["scheme"], alone["x-forwarded-proto"]) == ("http", ["http"])


async def test_a_trusted_proxys_websocket_keeps_its_scheme(router):
    """nginx in front (deploy/nginx) ends TLS and says so; the socket is wss to the app."""
    headers = {"X-Forwarded-For": "198.51.100.9", "X-Forwarded-Proto": "https"}
    socket = connect(router.ws_url("/echo"), additional_headers=headers, local_addr=(PROXY, 0))
    async with socket as ws:
        echoed = json.loads(await ws.recv())
    assert (echoed["client"], echoed["scheme"]) == ("198.51.100.9", "wss")


@pytest.mark.parametrize(
    ("peer", "said", "scheme"),
    [
        ("127.0.0.1", [b"https"], b"http"),  # a client's own word
        (PROXY, [b"https"], b"https"),
        (PROXY, [b"HTTPS "], b"https"),
        (PROXY, [], b"http"),
        (PROXY, [b"https", b"http"], b"http"),  # two: which proxy said which is unknown
        (PROXY, [b"gopher"], b"http"),
    ],
)
def test_only_a_trusted_proxy_says_the_scheme(peer, said, scheme):
    head = _Head(b"GET / HTTP/1.1", [(b"X-Forwarded-Proto", value) for value in said])
    assert TrustedProxies.parse(PROXY).scheme_of(peer, head) == scheme


def test_it_refuses_to_start_trusting_every_client_and_says_why():
    refusals = {
        "--forwarded-allow-ips=*": "'*' would take every client's X-Forwarded-For",
        "--trusted-proxies=10.0.0.1,nginx": "'nginx' is neither an IP address nor a CIDR",
    }
    for setting, reason in refusals.items():
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tau2_env.gate.session_router",
                APP,
                "--processes",
                "1",
                setting,
            ],
            cwd=ROOT,
            env=_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _, stderr = proc.communicate(timeout=60)
        finally:
            stop(Process(proc=proc))  # one that started after all stops its processes
        assert proc.returncode == 2
        assert "--trusted-proxies / TAU2_ROUTER_TRUSTED_PROXIES" in stderr
        assert reason in stderr


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("10.0.0.5", "203.0.113.66, 198.51.100.7", "198.51.100.7"),  # the proxy's own word
        ("10.0.0.5", "198.51.100.7, 10.0.0.9", "198.51.100.7"),  # through two proxies
        ("10.0.0.5", "10.0.0.8, 10.0.0.9", "10.0.0.8"),  # a proxy itself is the client
        ("10.0.0.5", "203.0.113.66, unknown", "10.0.0.5"),  # not an address: the proxy's
        ("10.0.0.5", "[2001:db8::7]:4711", "2001:db8::7"),
        ("::ffff:10.0.0.5", "198.51.100.7:4711", "198.51.100.7"),
        ("192.0.2.1", "198.51.100.7", "192.0.2.1"),  # not a proxy: its own address
    ],
)
def test_a_trusted_proxys_chain_is_read_from_the_right(peer, forwarded_for, client):
    trusted = TrustedProxies.parse("10.0.0.0/29, 10.0.0.9")
    head = _Head.parse(
        b"GET / HTTP/1.1\r\nX-Forwarded-For: " + forwarded_for.encode() + b"\r\n\r\n"
    )
    assert trusted.client_of(peer, head) == client

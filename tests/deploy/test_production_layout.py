"""The production layout, routed by its own proxy: Debian's nginx with deploy/nginx's
configuration (HTTPS on a certificate, as mounted in production) in front of web —
``uvicorn tau2site.asgi:application --workers 2`` — and openenv — the session router with
2 processes — each a process of its own on the test database, the customer played by the
scripted LLM.

The connect page, read through the proxy, prints the proxy's address; its ``Tau2Env`` and
MCP SDK snippets, run as printed (a studio key pasted in) 20 times each, complete 20
episodes of 20: every call of a session reaches the process holding it. Without the proxy,
web's two workers answered 12 of 20 such calls ``Unknown session_id``. Pages and the live
pages' sockets reach web.
"""

from __future__ import annotations

import html
import json
import os
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from apps.agents.services import api_key_create
from apps.agents.views import KEY_PLACEHOLDER
from tests.support import processes
from tests.support import proxy as front
from tests.support.agents import agent_runs_of
from tests.support.llm_server import text
from tests.support.people import ALICE_TOKEN, signed_in

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(front.missing() is not None, reason=str(front.missing())),
]

ROOT = Path(__file__).resolve().parents[2]
EPISODES = 20
CUSTOMER_LINE = "Hi, I need to change a flight."
# Runs a snippet's text as printed, ``EPISODES`` times, each in a fresh namespace as
# `python -c` would; counts the episodes that raised instead of stopping at the first.
DRIVER = """\
import sys, traceback
code = compile(sys.stdin.read(), "<snippet>", "exec")
for _ in range(int(sys.argv[1])):
    try:
        exec(code, {"__name__": "__main__"})
    except BaseException:
        print("failed:", traceback.format_exc().replace("\\n", " | "))
"""


@dataclass
class Layout:
    proxy: front.Proxy
    web: processes.Process
    openenv: processes.Process
    cert: Path

    @property
    def url(self) -> str:
        return self.proxy.tls_url


@pytest.fixture
def layout(committed_db, llm_server, tmp_path) -> Iterator[Layout]:
    env = processes.environment(
        llm=llm_server,
        extra={"TAU2_AGENT_API_REQUIRE_KEY": "true", "TAU2_LLM_TIMEOUT": "60"},
    )
    # Each believes forwarded headers from the proxy only (here on loopback).
    web = processes.start_web(
        env, workers=2, args=("--proxy-headers", "--forwarded-allow-ips", "127.0.0.1")
    )
    openenv = processes.start_router(
        env, app="tau2site.asgi:application", args=("--trusted-proxies", "127.0.0.1")
    )
    started: list = [web, openenv]
    try:
        processes.wait_until_up(web, openenv)
        certs = front.self_signed(tmp_path / "certs")
        proxy = front.start_proxy(
            tmp_path / "nginx",
            web=web.url.removeprefix("http://"),
            openenv=openenv.url.removeprefix("http://"),
            certs=certs,
        )
        started.append(proxy)
        yield Layout(proxy=proxy, web=web, openenv=openenv, cert=certs / "fullchain.pem")
    finally:
        for process in reversed(started):
            if isinstance(process, front.Proxy):
                process.stop()
            else:
                processes.stop(process)


def _connect_page(layout: Layout, session: str) -> httpx.Response:
    return httpx.get(
        f"{layout.url}/agents/",
        cookies={"sessionid": session},
        verify=str(layout.cert),
        timeout=60,
    )


def _snippets(page: str) -> dict[str, str]:
    """The text of each ``<pre data-testid="snippet-…">``, as a browser would copy it."""
    pattern = r'<pre data-testid="snippet-([\w-]+)"[^>]*><code>(.*?)</code></pre>'
    return {name: html.unescape(body) for name, body in re.findall(pattern, page, re.S)}


def _play(snippet: str, cert: Path) -> str:
    """``snippet`` run ``EPISODES`` times in a Python of its own, trusting ``cert``."""
    result = subprocess.run(
        [sys.executable, "-c", DRIVER, str(EPISODES)],
        input=snippet,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env={**os.environ, "SSL_CERT_FILE": str(cert)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_connect_pages_snippets_complete_every_episode_through_the_proxy(
    layout, llm_server, alice
):
    llm_server.responder = lambda request: text(CUSTOMER_LINE)
    key = api_key_create(user=alice, name="production layout")[1]
    session = signed_in(alice).cookies["sessionid"].value

    page = _connect_page(layout, session)
    snippets = _snippets(page.text)

    # A page: web's (only the router marks its answers with the process that served them).
    assert page.status_code == 200
    assert "x-tau2-process" not in page.headers
    # The agents' URL is the site's own, as the proxy serves it.
    assert f'base_url="{layout.url}"' in snippets["openenv"]
    assert f'URL = "{layout.url}/agent/mcp?' in snippets["mcp"]

    played = {
        name: _play(snippets[name].replace(KEY_PLACEHOLDER, key), layout.cert)
        for name in ("openenv", "mcp")
    }

    for name, out in played.items():
        done = re.findall(r"^done: True reward: [01]\.0$", out, re.M)
        failed = [line for line in out.splitlines() if line.startswith("failed:")]
        assert (len(done), failed) == (EPISODES, []), name
        assert out.count(f"customer: {CUSTOMER_LINE}") >= EPISODES, name
    # Every episode a run of alice's, ended, on her own token.
    runs = agent_runs_of(alice, count=2 * EPISODES, timeout=120)
    assert len(runs) == 2 * EPISODES
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}

    # A live page's socket, through the proxy: web's Channels, the run's events and its end.
    with connect(
        layout.url.replace("https://", "wss://") + f"/ws/runs/{runs[0].pk}/?after=-1",
        additional_headers={"Cookie": f"sessionid={session}", "Origin": layout.url},
        ssl=ssl.create_default_context(cafile=str(layout.cert)),
        open_timeout=60,
    ) as ws:
        assert "x-tau2-process" not in ws.response.headers
        messages = [json.loads(ws.recv(timeout=60)) for _ in range(runs[0].events.count() + 1)]
    assert [m["type"] for m in messages][-1] == "status"
    assert messages[-1]["final"] is True

    # What went where, as nginx logged it: the agent faces to the router, the rest to web.
    routed = _upstreams(layout.proxy.access_log())
    web, openenv = (p.url.removeprefix("http://") for p in (layout.web, layout.openenv))
    assert routed["/agents/"] == {web}
    assert routed[f"/ws/runs/{runs[0].pk}/"] == {web}
    for path in ("/mcp", "/ws", "/agent/mcp"):
        assert routed[path] == {openenv}, path
    assert set(routed) <= {"/agents/", f"/ws/runs/{runs[0].pk}/", "/mcp", "/ws", "/agent/mcp"}


def _upstreams(lines: list[str]) -> dict[str, set[str]]:
    """Each path (without its query) and the upstream addresses nginx sent it to."""
    routed: dict[str, set[str]] = {}
    for line in lines:
        _method, uri, _status, upstream = line.split(" ", 3)
        routed.setdefault(uri.partition("?")[0], set()).add(upstream)
    return routed

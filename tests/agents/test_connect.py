""" "Connect an agent" (/agents/): snippets filled with this server's URL, each run as
printed — with a real studio key put where the placeholder is — against the live server
(tau2site.asgi), the customer played by the scripted LLM."""

from __future__ import annotations

import asyncio
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from apps.agents.services import api_key_create
from apps.agents.views import KEY_PLACEHOLDER
from tests.support.agents import agent_runs_of
from tests.support.people import ALICE_TOKEN, signed_in

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def alice_key(alice):
    return api_key_create(user=alice, name="snippets")[1]


def _page(asgi_server, user=None) -> httpx.Response:
    cookies = {"sessionid": signed_in(user).cookies["sessionid"].value} if user else {}
    return httpx.get(f"{asgi_server.url}/agents/", cookies=cookies, timeout=30)


def _snippets(page: str) -> dict[str, str]:
    """The text of each ``<pre data-testid="snippet-…">``, as a browser would copy it."""
    pattern = r'<pre data-testid="snippet-([\w-]+)"[^>]*><code>(.*?)</code></pre>'
    found = re.findall(pattern, page, re.S)
    return {name: html.unescape(body) for name, body in found}


def _run_python(snippet: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", snippet],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_snippets_name_this_server_and_a_placeholder_never_a_key(asgi_server, alice, alice_key):
    page = _page(asgi_server, alice)
    snippets = _snippets(page.text)

    assert page.status_code == 200
    assert set(snippets) == {
        "openenv",
        "generic",
        "mcp",
        "mcp-config",
        "evaluation-openenv",
        "evaluation-mcp",
    }
    for name, snippet in snippets.items():
        assert asgi_server.url in snippet, name
        assert KEY_PLACEHOLDER in snippet, name
    assert alice_key not in page.text
    assert 'href="/accounts/keys/"' in page.text  # "use a studio key": her keys page
    # The copy buttons are a static script's (CSP: no inline script).
    assert "/static/js/agents_connect.js" in page.text
    assert "<script>" not in page.text


def test_the_snippets_follow_the_host_the_request_came_to(alice_client):
    page = alice_client.get("/agents/", HTTP_HOST="localhost:8123").content.decode()

    assert "http://localhost:8123/agent/mcp?" in html.unescape(page)
    assert 'base_url="http://localhost:8123"' in html.unescape(page)


def test_the_agents_url_setting_is_what_the_snippets_and_the_keys_page_print(
    alice_client, settings
):
    settings.TAU2_AGENTS_URL = "https://agents.example.org"

    connect = html.unescape(
        alice_client.get("/agents/", HTTP_HOST="localhost:8123").content.decode()
    )
    keys = html.unescape(alice_client.get("/accounts/keys/").content.decode())

    assert 'base_url="https://agents.example.org"' in connect
    assert "https://agents.example.org/agent/mcp?" in connect
    assert "localhost:8123/agent" not in connect and 'base_url="http://localhost' not in connect
    # The key's own link stays the site's: the keys page is a page, served by web.
    assert "http://localhost:8123/accounts/keys/" in connect
    assert '<code data-testid="agents-url">https://agents.example.org</code>' in keys
    assert "https://agents.example.org/agent/mcp" in keys


def test_the_keys_page_prints_the_sites_own_url_by_default(alice_client):
    keys = alice_client.get("/accounts/keys/", HTTP_HOST="localhost:8123").content.decode()

    assert '<code data-testid="agents-url">http://localhost:8123</code>' in keys


@pytest.fixture
def key_required(settings):
    """A server that serves agents with a key only: the snippets must work there too."""
    settings.TAU2_AGENT_API_REQUIRE_KEY = True


@pytest.mark.parametrize("name", ["openenv", "generic", "mcp"])
def test_each_python_snippet_plays_an_episode_as_printed(
    asgi_server, customer, customer_line, alice, alice_key, key_required, name
):
    snippet = _snippets(_page(asgi_server, alice).text)[name]

    out = _run_python(snippet.replace(KEY_PLACEHOLDER, alice_key))

    assert f"customer: {customer_line}" in out
    assert re.search(r"^done: True reward: [01]\.0$", out, re.M), out
    # The customer ran on the key's owner's vault token, never on the key itself, and
    # the episode is in her history.
    assert {r.token for r in customer.chat_requests()} == {ALICE_TOKEN}
    (run,) = agent_runs_of(alice)
    assert run.task_id and run.is_final


def test_the_mcp_configuration_file_connects_with_the_sdk(
    asgi_server, customer, customer_line, alice, alice_key, key_required
):
    config = json.loads(_snippets(_page(asgi_server, alice).text)["mcp-config"])
    (server,) = config["mcpServers"].values()
    headers = {
        name: value.replace(KEY_PLACEHOLDER, alice_key) for name, value in server["headers"].items()
    }

    async def play() -> tuple[list[str], dict]:
        async with (
            httpx.AsyncClient(headers=headers, timeout=120) as http,
            streamable_http_client(server["url"], http_client=http) as (read, write, _),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = [tool.name for tool in (await session.list_tools()).tools]
            opening = (await session.call_tool("start", {})).structuredContent
            final = (await session.call_tool("done", {})).structuredContent
            return tools, opening, final

    tools, opening, final = asyncio.run(play())

    assert server["type"] == "http"
    assert {"start", "respond_to_user", "done"} <= set(tools)
    assert opening["user_message"] == customer_line
    assert final["done"] is True
    assert {r.token for r in customer.chat_requests()} == {ALICE_TOKEN}
    agent_runs_of(alice)  # recorded, and ended


def test_anyone_may_read_the_page_and_is_sent_to_sign_in_for_a_key(client, db):
    page = client.get("/agents/").content.decode()

    assert "Sign in" in page and KEY_PLACEHOLDER in page
    assert 'data-testid="keys-link"' not in page


def test_both_own_agent_clients_play_a_whole_evaluation_as_printed_sharing_it(
    asgi_server, customer, customer_line, alice, alice_key, key_required
):
    from apps.evaluations.services import TaskChoice, evaluation_create
    from apps.runs.models import Run
    from apps.runs.spec import RunSpec, Side

    evaluation = evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side("my-bot@1", llm=False), customer=Side("scripted/customer")),
        tasks=TaskChoice(domain="airline", task_ids=["0", "1"]),
        num_trials=2,
        concurrency=2,
        external_agent=True,
    )
    cookies = {"sessionid": signed_in(alice).cookies["sessionid"].value}
    page = httpx.get(
        f"{asgi_server.url}/agents/?evaluation={evaluation.pk}", cookies=cookies, timeout=30
    )
    snippets = _snippets(page.text)
    clients = [
        subprocess.Popen(
            [sys.executable, "-c", snippets[name].replace(KEY_PLACEHOLDER, alice_key)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for name in ("evaluation-openenv", "evaluation-mcp")
    ]
    outs = []
    for client in clients:
        out, err = client.communicate(timeout=240)
        assert client.returncode == 0, err[-3000:]
        outs.append(out)

    assert f"EVALUATION = {evaluation.pk}" in snippets["evaluation-mcp"]
    played = sum(len(re.findall(r"^(played )?task \d+ trial \d", o, re.M)) for o in outs)
    assert played == 4  # every episode, once, between the two
    assert f"customer: {customer_line}" in "".join(outs)
    runs = list(Run.objects.filter(evaluation=evaluation))
    assert {r.status for r in runs} == {"completed"} and len(runs) == 4
    assert {r.token for r in customer.chat_requests()} == {ALICE_TOKEN}

"""No cross-site use of the agent faces (issue 18, items 2 and 5), against the live server
with a server ``HF_TOKEN`` set and no key required: what a hostile page, a DNS-rebinding
page or hostile input gets from OpenEnv's API (``/ws``, ``/reset``, ``/mcp``) and the MCP
server (``/agent/mcp``) — refused, with nothing spent on the server's token — while the
site's own pages and clients that are not browsers still play.

charlie is anonymous throughout: the probes need no account, which is what made them bad.
"""

from __future__ import annotations

import json
import subprocess
import sys
from itertools import product
from urllib.parse import urlsplit

import httpx
import hypothesis
import pytest
import schemathesis
from django.http.request import split_domain_port, validate_host
from django.middleware.csrf import CsrfViewMiddleware
from django.test import RequestFactory
from hypothesis import HealthCheck, given
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tau2_env.gate.guard import host_allowed, origin_allowed
from tests.support.llm_server import text
from tests.support.mcp_client import INITIALIZE, MCP_HEADERS, mcp_session

SERVER_TOKEN = "hf_server_token_guard_00000000"
CUSTOMER_LINE = "Hi, I need help with my booking."
EVIL = "http://evil.example"
CREATE = {"jsonrpc": "2.0", "id": 1, "method": "openenv/session/create", "params": {}}
RESET = {"type": "reset", "data": {"domain": "airline", "task_id": "27"}}
EXAMPLES = 25  # schemathesis's, per operation and mode (valid, then invalid input)


@pytest.fixture
def customer(llm_server, monkeypatch):
    """The scripted customer, with the server's own token set: what a hostile page wants."""
    monkeypatch.setenv("HF_TOKEN", SERVER_TOKEN)
    llm_server.responder = lambda request: text(CUSTOMER_LINE)
    return llm_server


def _nested(depth: int) -> str:
    """An object ``depth`` levels deep, as JSON text (too deep for ``json.dumps``)."""
    return '{"a": ' * depth + "{}" + "}" * depth


async def _reset_over_ws(url: str, *, origin: str | None) -> dict:
    headers = {"Origin": origin} if origin else {}
    async with connect(url, additional_headers=headers, max_size=None) as ws:
        await ws.send(json.dumps(RESET))
        return json.loads(await ws.recv())


# --- A page of another site -----------------------------------------------------------------


async def test_a_socket_from_another_sites_page_is_refused_before_any_episode(
    asgi_server, customer
):
    with pytest.raises(InvalidStatus) as refused:
        await _reset_over_ws(asgi_server.ws_url("/ws"), origin=EVIL)

    assert refused.value.response.status_code == 403
    assert customer.chat_requests() == []


@pytest.mark.parametrize("own_page", [True, False], ids=["the-sites-page", "no-origin"])
async def test_the_sites_own_pages_and_clients_without_origin_still_play(
    asgi_server, customer, own_page
):
    origin = asgi_server.url if own_page else None

    frame = await _reset_over_ws(asgi_server.ws_url("/ws"), origin=origin)

    assert frame["type"] == "observation", frame
    assert frame["data"]["observation"]["metadata"]["user_message"] == CUSTOMER_LINE
    assert {r.token for r in customer.chat_requests()} == {SERVER_TOKEN}


@pytest.mark.parametrize(
    ("path", "body"),
    [("/reset", {"domain": "airline", "task_id": "27"}), ("/mcp", CREATE)],
)
async def test_a_post_from_another_sites_page_is_refused(asgi_server, customer, path, body):
    async with httpx.AsyncClient(base_url=asgi_server.url) as http:
        response = await http.post(path, json=body, headers={"Origin": EVIL})

    assert response.status_code == 403
    assert "is not this site's" in response.text
    assert customer.chat_requests() == []


async def test_a_text_plain_post_which_needs_no_preflight_creates_no_session(asgi_server, customer):
    async with httpx.AsyncClient(base_url=asgi_server.url) as http:
        response = await http.post(
            "/mcp", content=json.dumps(CREATE), headers={"Content-Type": "text/plain"}
        )

    assert response.status_code == 415
    assert response.json()["error"]["message"] == (
        "Unsupported media type: the body must be application/json, not 'text/plain'."
    )
    assert "result" not in response.json()  # no session id: none was created


# --- DNS rebinding: a page whose own name resolves to this server ---------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [("/agent/mcp", INITIALIZE), ("/mcp", CREATE), ("/reset", {"task_id": "27"})],
)
async def test_a_request_to_a_host_that_is_not_ours_is_refused(asgi_server, customer, path, body):
    port = urlsplit(asgi_server.url).port
    async with httpx.AsyncClient(base_url=asgi_server.url) as http:
        response = await http.post(
            path, json=body, headers={**MCP_HEADERS, "Host": f"attacker.example:{port}"}
        )

    assert response.status_code == 400
    assert f"'attacker.example:{port}' is not an allowed host" in response.text
    assert "mcp-session-id" not in response.headers
    assert customer.chat_requests() == []


async def test_the_mcp_sdks_own_dns_rebinding_protection_is_on_behind_the_guard():
    from tau2site.asgi import application

    mcp = application.mcp_app
    security = mcp.transport_security
    async with (
        mcp.run(),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=mcp), base_url="http://x") as http,
    ):
        # Straight to the MCP app, past the guard: the SDK refuses the host itself.
        response = await http.post(
            "/agent/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "Host": "attacker.example"}
        )

    assert security.enable_dns_rebinding_protection is True
    assert {"127.0.0.1:*", "testserver"} <= set(security.allowed_hosts)
    assert response.status_code == 421


async def test_the_official_mcp_client_still_plays_through_the_guard(asgi_server, customer):
    async with mcp_session(f"{asgi_server.url}/agent/mcp?domain=airline&task_id=27") as session:
        started = await session.call_tool("start", {})

    assert started.isError is False, started
    assert started.structuredContent["user_message"] == CUSTOMER_LINE


# --- Hostile input: 4xx with a reason, never 5xx ---------------------------------------------


async def test_a_websocket_on_the_mcp_server_which_speaks_http_only_is_refused(asgi_server):
    with pytest.raises(InvalidStatus) as refused:
        async with connect(asgi_server.ws_url("/agent/mcp")):
            pass

    assert refused.value.response.status_code == 403


DEEP_PARAMS = '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": ' + _nested(50_000)
DEEP_PARAMS += "}"
DEEP_ARGUMENTS = (
    '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": '
    f'{{"name": "get_user_details", "arguments": {_nested(50_000)}}}}}'
)
LONG_ID = '{"jsonrpc": "2.0", "id": ' + "9" * 5000 + ', "method": "tools/list", "params": {}}'


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (DEEP_PARAMS, "nested deeper than 64 levels"),
        (DEEP_ARGUMENTS, "nested deeper than 64 levels"),
        (LONG_ID, "an integer of 5,000 digits"),
    ],
    ids=["deep-params", "deep-arguments", "5000-digit-id"],
)
@pytest.mark.parametrize("path", ["/mcp", "/agent/mcp"])
async def test_deep_or_huge_json_rpc_is_refused_with_its_reason(asgi_server, path, payload, reason):
    headers = {**MCP_HEADERS, "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=asgi_server.url, timeout=30) as http:
        response = await http.post(path, content=payload, headers=headers)

    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32700 and reason in error["message"]


async def test_a_deep_frame_on_an_open_socket_is_an_error_frame_and_the_episode_goes_on(
    asgi_server, customer
):
    deep = '{"type": "step", "data": {"type": "call_tool", "tool_name": "x", "arguments": '
    deep += _nested(5000) + "}}"
    async with connect(asgi_server.ws_url("/ws")) as ws:
        await ws.send(json.dumps(RESET))
        opened = json.loads(await ws.recv())
        await ws.send(deep)
        refused = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "state"}))
        state = json.loads(await ws.recv())

    assert opened["type"] == "observation"
    assert refused == {
        "type": "error",
        "data": {"message": "The frame is nested deeper than 64 levels.", "code": "INVALID_JSON"},
    }
    assert state["type"] == "state"


def test_the_faces_never_answer_5xx_to_what_their_openapi_schema_allows_or_forbids(
    asgi_server, customer
):
    schema = schemathesis.openapi.from_url(f"{asgi_server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/reset", "/step", "/mcp", "/{env_name}/tasks"}
    asked = []

    for operation, mode in product(operations, schemathesis.GenerationMode):

        @given(case=operation.as_strategy(mode))
        @hypothesis.settings(
            max_examples=EXAMPLES,
            derandomize=True,  # the same examples on every run: CI never flakes
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def never_5xx(case):
            asked.append(case.path)
            case.call_and_validate(base_url=asgi_server.url, checks=[not_a_server_error])

        try:
            never_5xx()
        except Unsatisfiable:  # no parameter to break: nothing negative to send
            assert mode is schemathesis.GenerationMode.NEGATIVE
    assert len(asked) >= len(operations) * 5


# --- The guard decides as Django does --------------------------------------------------------

HOSTS = ["tau2.example.org", ".hf.space", "127.0.0.1", "[::1]"]


@pytest.mark.parametrize(
    "host",
    [
        "tau2.example.org", "TAU2.example.org:443", "tau2.example.org.", "x.tau2.example.org",
        "hf.space", "a.b.hf.space:8000", "evil.example", "127.0.0.1:8000", "127.0.0.1:",
        "[::1]:8000", "[::1", "[fe80::1]", "tau2.example.org:80:80", "tau2.example.org@evil",
        "", "tau2_example.org", "١٢٧.0.0.1",
    ],
)  # fmt: skip
def test_the_guard_allows_the_hosts_django_allows(host):
    domain, _port = split_domain_port(host)

    assert host_allowed(host, HOSTS) is (bool(domain) and validate_host(domain, HOSTS))
    assert host_allowed(host, ["*"]) is bool(domain)


TRUSTED = ["https://studio.example.org", "https://*.trusted.example", "http://localhost:8000"]


@pytest.mark.parametrize(
    ("origin", "secure"),
    [
        ("https://tau2.example.org", True), ("http://tau2.example.org", True),
        ("https://tau2.example.org", False), ("http://tau2.example.org", False),
        ("https://tau2.example.org:443", True), ("https://studio.example.org", False),
        ("https://a.trusted.example", True), ("https://trusted.example", True),
        ("http://a.trusted.example", True), ("http://localhost:8000", True),
        ("http://localhost", True), ("null", True), ("https://evil.example", True),
    ],
)  # fmt: skip
def test_the_guard_trusts_the_origins_djangos_csrf_check_trusts(settings, origin, secure):
    settings.CSRF_TRUSTED_ORIGINS = TRUSTED
    settings.ALLOWED_HOSTS = ["tau2.example.org"]
    request = RequestFactory().post(
        "/", HTTP_HOST="tau2.example.org", HTTP_ORIGIN=origin, secure=secure
    )
    django = CsrfViewMiddleware(lambda request: None)._origin_verified(request)

    guard = origin_allowed(origin, host="tau2.example.org", secure=secure, trusted_origins=TRUSTED)

    assert guard is django


# --- Keys where the server has a token ------------------------------------------------------


def _settings_in_a_fresh_process(**env: str) -> str:
    script = (
        "import django; django.setup(); from django.conf import settings; "
        "print(settings.TAU2_AGENT_API_REQUIRE_KEY)"
    )
    base = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "tau2site.settings",
        "TAU2_ENV_FILE": "",
        "DJANGO_SECRET_KEY": "tests-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",
        "TAU2_VAULT_KEYS": "N3uZF8m7DxGjISnnXFZbWKgVJn9hg-w_PPTB7gok6yA=",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env={**base, **env}, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_with_a_server_token_and_debug_off_keys_are_required_unless_said_otherwise():
    token = {"HF_TOKEN": SERVER_TOKEN}

    assert _settings_in_a_fresh_process(**token) == "True"
    assert _settings_in_a_fresh_process(**token, TAU2_AGENT_API_REQUIRE_KEY="false") == "False"
    assert _settings_in_a_fresh_process(**token, DEBUG="true") == "False"  # a laptop
    assert _settings_in_a_fresh_process() == "False"  # no token to spend

"""The agent faces' guard (tau2_env.gate.guard) on its own, without Django or a server: what it
refuses, in which face's words, and that what it lets through reaches the face unchanged.

The face behind it is a recording ASGI app: it answers 200 with the body it read, and
echoes WebSocket frames.
"""

from __future__ import annotations

import json

import pytest

from tau2_env.gate import guard
from tau2_env.gate.guard import AgentFaceGuard, GuardSettings, host_allowed, origin_allowed

SETTINGS = GuardSettings(
    allowed_hosts=("tau2.example.org", ".hf.space", "127.0.0.1"),
    trusted_origins=("https://studio.example.org", "https://*.trusted.example"),
    max_body_bytes=4096,
)
HOST = "tau2.example.org"
SITE = "https://tau2.example.org"


class Face:
    """An ASGI face that records what reached it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.frames: list[str] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            self.bodies.append(body)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            self.frames.append(message["text"])
            await send({"type": "websocket.send", "text": f"echo {message['text']}"})


def _scope(kind="http", *, path="/step", method="POST", host=HOST, scheme=None, **headers):
    pairs = [(b"host", host.encode())] if host is not None else []
    pairs += [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": kind, "path": path, "headers": pairs, "scheme": scheme or "https"}
    if kind == "http":
        scope["method"] = method
    return scope


async def _http(app, scope, *chunks: bytes) -> tuple[int, dict | bytes]:
    incoming = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks or (b"",))
    ]
    sent = []

    async def receive():
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    is_json = (b"content-type", b"application/json") in sent[0].get("headers", [])
    return sent[0]["status"], json.loads(body) if is_json else body


async def _websocket(app, scope, *frames: str) -> list[dict]:
    incoming = [{"type": "websocket.connect"}]
    incoming += [{"type": "websocket.receive", "text": f} for f in frames]
    incoming.append({"type": "websocket.disconnect", "code": 1000})
    sent = []

    async def receive():
        return incoming.pop(0)

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _guarded(face=guard.OPENENV_FACE, settings=SETTINGS) -> tuple[AgentFaceGuard, Face]:
    inner = Face()
    return AgentFaceGuard(inner, face=face, settings=lambda: settings), inner


def _deep(depth: int) -> bytes:
    return b'{"action": ' + b"[" * depth + b"]" * depth + b"}"


# --- Host and Origin ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("tau2.example.org", True),
        ("tau2.example.org:8443", True),
        ("TAU2.Example.org.", True),  # case and a trailing dot, as Django
        ("evil.example", False),
        ("tau2.example.org.evil.example", False),
        ("hf.space", True),  # .hf.space: the domain itself
        ("me-tau2.hf.space", True),  # and its subdomains
        ("nothf.space", False),
        ("127.0.0.1:8000", True),
        ("127.0.0.1:port", False),
        ("tau2.example.org:8000:1", False),
        ("tau2.example.org/", False),
        ("", False),
    ],
)
def test_a_host_is_allowed_as_django_allows_it(host, allowed):
    assert host_allowed(host, SETTINGS.allowed_hosts) is allowed


def test_any_host_is_allowed_with_a_star_and_none_without_a_pattern():
    assert host_allowed("anything.example:1", ["*"])
    assert not host_allowed("localhost", [])
    assert host_allowed("[::1]:8000", ["[::1]"])


@pytest.mark.parametrize(
    ("origin", "secure", "allowed"),
    [
        ("https://tau2.example.org", True, True),
        ("http://tau2.example.org", True, False),  # the same host on another scheme
        ("https://tau2.example.org", False, False),
        ("https://tau2.example.org:8443", True, False),  # another port
        ("https://studio.example.org", True, True),  # trusted
        ("https://a.b.trusted.example", True, True),  # a subdomain of a trusted pattern
        ("http://a.trusted.example", True, False),  # not on its scheme
        ("https://evil.example", True, False),
        ("null", True, False),  # a sandboxed page, a file
    ],
)
def test_an_origin_is_allowed_when_it_is_the_sites_own_or_trusted(origin, secure, allowed):
    verdict = origin_allowed(
        origin, host=HOST, secure=secure, trusted_origins=SETTINGS.trusted_origins
    )
    assert verdict is allowed


def test_behind_a_tls_proxy_the_proxys_header_says_the_request_is_secure():
    behind = GuardSettings(allowed_hosts=(HOST,), proxy_ssl_header=("x-forwarded-proto", "https"))
    proxied = _scope(scheme="http", origin=SITE, x_forwarded_proto="https")

    assert behind.refusal(proxied) is None
    assert behind.refusal(_scope(scheme="http", origin=SITE)).status == 403
    assert SETTINGS.refusal(proxied).status == 403  # no proxy configured: not trusted


# --- HTTP -----------------------------------------------------------------------------------


async def test_a_request_to_another_host_is_refused_with_400_and_never_reaches_the_face():
    app, face = _guarded()

    status, body = await _http(app, _scope(host="attacker.example:8000"), b"{}")

    assert status == 400
    assert body == {
        "detail": "Invalid Host header: 'attacker.example:8000' is not an allowed host."
    }
    assert face.bodies == []


async def test_a_request_without_a_host_is_refused():
    app, face = _guarded()

    status, body = await _http(app, _scope(host=None), b"{}")

    assert status == 400 and face.bodies == []
    assert body == {"detail": "Invalid Host header: the request names no host."}


async def test_on_a_json_rpc_path_the_refusal_is_a_json_rpc_error():
    app, _ = _guarded()
    mcp, _ = _guarded(guard.MCP_FACE)

    for guarded, path in ((app, "/mcp"), (mcp, "/agent/mcp")):
        status, body = await _http(guarded, _scope(path=path, origin="https://evil.example"))

        assert status == 403
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert body["error"]["code"] == guard.INVALID_REQUEST
        assert "'https://evil.example' is not this site's" in body["error"]["message"]


async def test_a_cross_site_origin_is_refused_and_the_sites_own_or_none_passes():
    app, face = _guarded()

    refused, body = await _http(app, _scope(origin="https://evil.example"), b"{}")
    own, _ = await _http(app, _scope(origin=SITE, content_type="application/json"), b"{}")
    none, _ = await _http(app, _scope(content_type="application/json"), b"{}")

    assert refused == 403 and "Cross-site request refused" in body["detail"]
    assert (own, none) == (200, 200)
    assert face.bodies == [b"{}", b"{}"]


async def test_a_body_that_is_not_json_is_refused_with_415():
    app, face = _guarded()

    plain, body = await _http(app, _scope(content_type="text/plain"), b'{"action": "hi"}')
    form, _ = await _http(
        app, _scope(content_type="application/x-www-form-urlencoded"), b"action=hi"
    )
    untyped, untyped_body = await _http(app, _scope(), b'{"action": "hi"}')

    assert (plain, form, untyped) == (415, 415, 415)
    assert body == {
        "detail": "Unsupported media type: the body must be application/json, not 'text/plain'."
    }
    assert "has no Content-Type" in untyped_body["detail"]
    assert face.bodies == []


async def test_a_json_body_reaches_the_face_unchanged_and_a_post_without_a_body_passes():
    app, face = _guarded()
    sent = b'{"action": {"type": "call_tool", "tool_name": "done", "arguments": {}}}'

    typed, echoed = await _http(
        app, _scope(content_type="application/json; charset=utf-8"), sent[:20], sent[20:]
    )
    empty, _ = await _http(app, _scope(path="/reset"))

    assert (typed, echoed) == (200, sent)
    assert empty == 200
    assert face.bodies == [sent, b""]


async def test_a_body_over_the_cap_is_refused_with_413_declared_or_streamed():
    app, face = _guarded()
    json_type = {"content_type": "application/json"}

    declared, body = await _http(app, _scope(content_length="5000", **json_type), b"{}")
    streamed, _ = await _http(app, _scope(**json_type), b'{"a": "' + b"x" * 3000, b"x" * 3000)

    assert (declared, streamed) == (413, 413)
    assert body == {"detail": "The body is larger than 4,096 bytes."}
    assert face.bodies == []


@pytest.mark.parametrize(
    ("sent", "status", "reason"),
    [
        (_deep(50_000), 400, "nested deeper than 64 levels"),
        (b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "tools/list"}', 400, "digits"),
        (b'{"action": "a\\u0000b"}', 400, "NUL"),
        (b'{"action": ', 400, "The body is not JSON"),
    ],
)
async def test_a_json_body_the_bounded_reader_refuses_never_reaches_the_face(sent, status, reason):
    app, face = _guarded(settings=GuardSettings(allowed_hosts=(HOST,), max_body_bytes=200_000))

    got, body = await _http(app, _scope(content_type="application/json"), sent)
    rpc, rpc_body = await _http(app, _scope(path="/mcp", content_type="application/json"), sent)

    assert (got, rpc) == (status, status)
    assert reason in body["detail"]
    assert rpc_body["error"]["code"] == guard.PARSE_ERROR and reason in rpc_body["error"]["message"]
    assert face.bodies == []


async def test_health_answers_any_host_for_health_checks_by_address():
    app, _ = _guarded()

    status, _ = await _http(app, _scope(path="/health", method="GET", host="172.18.0.4:8001"))
    other, _ = await _http(app, _scope(path="/schema", method="GET", host="172.18.0.4:8001"))

    assert (status, other) == (200, 400)


# --- WebSockets -----------------------------------------------------------------------------


async def test_a_cross_site_websocket_is_closed_before_it_is_accepted():
    app, face = _guarded()

    sent = await _websocket(app, _scope("websocket", path="/ws", origin="https://evil.example"))

    assert [m["type"] for m in sent] == ["websocket.close"]  # the server answers 403
    assert "is not this site's" in sent[0]["reason"]
    assert face.frames == []


async def test_a_websocket_to_another_host_is_closed_before_it_is_accepted():
    app, face = _guarded()

    sent = await _websocket(app, _scope("websocket", path="/ws", host="attacker.example"))

    assert [m["type"] for m in sent] == ["websocket.close"]
    assert "attacker.example" in sent[0]["reason"]
    assert face.frames == []


async def test_a_websocket_where_the_face_serves_none_is_refused():
    mcp, face = _guarded(guard.MCP_FACE)

    sent = await _websocket(mcp, _scope("websocket", path="/agent/mcp"))

    assert [m["type"] for m in sent] == ["websocket.close"]
    assert "speaks HTTP only" in sent[0]["reason"]
    assert face.frames == []


async def test_a_websocket_from_the_site_or_without_origin_is_served():
    app, face = _guarded()

    own = await _websocket(app, _scope("websocket", path="/ws", origin=SITE), '{"type": "state"}')
    bare = await _websocket(app, _scope("websocket", path="/ws"), '{"type": "state"}')

    for sent in (own, bare):
        assert [m["type"] for m in sent] == ["websocket.accept", "websocket.send"]
    assert face.frames == ['{"type": "state"}', '{"type": "state"}']


async def test_a_refused_frame_gets_an_error_frame_and_the_socket_goes_on():
    app, face = _guarded()
    deep = _deep(1_000).decode()

    sent = await _websocket(app, _scope("websocket", path="/ws"), deep, '{"type": "state"}')

    error = json.loads(sent[1]["text"])
    assert error["type"] == "error" and error["data"]["code"] == "INVALID_JSON"
    assert error["data"]["message"] == "The frame is nested deeper than 64 levels."
    assert sent[2]["text"] == 'echo {"type": "state"}'
    assert face.frames == ['{"type": "state"}']


async def test_on_openenvs_mcp_socket_a_refused_frame_is_a_json_rpc_error():
    app, face = _guarded()
    huge = '{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"a": "' + "x" * 5000

    sent = await _websocket(app, _scope("websocket", path="/mcp"), huge + '"}}')

    error = json.loads(sent[1]["text"])
    assert error["error"]["code"] == guard.PARSE_ERROR
    assert error["error"]["message"] == "The frame is larger than 4,096 bytes."
    assert face.frames == []


async def test_settings_are_read_for_each_connection():
    current = [SETTINGS]
    face = Face()
    app = AgentFaceGuard(face, face=guard.OPENENV_FACE, settings=lambda: current[0])
    scope = _scope(host="new.example.org", content_type="application/json")

    before, _ = await _http(app, scope, b"{}")
    current[0] = GuardSettings(allowed_hosts=("new.example.org",))
    after, _ = await _http(app, scope, b"{}")

    assert (before, after) == (400, 200)


# --- The MCP SDK's protection, and the standalone server's settings --------------------------


def test_the_sdks_protection_gets_the_same_hosts_on_any_port():
    security = guard.transport_security(
        GuardSettings(allowed_hosts=("tau2.example.org", "[::1]"), trusted_origins=(SITE,))
    )

    assert security.enable_dns_rebinding_protection is True
    assert security.allowed_hosts == ["tau2.example.org", "tau2.example.org:*", "[::1]", "[::1]:*"]
    assert {"https://tau2.example.org:*", "http://[::1]", SITE} <= set(security.allowed_origins)


@pytest.mark.parametrize(
    ("hosts", "trusted"),
    [(("*",), ()), ((".example.org",), ()), (("tau2.example.org",), ("https://*.example.org",))],
)
def test_where_the_sdk_has_no_pattern_its_protection_is_off_and_the_guard_alone_checks(
    hosts, trusted
):
    settings = GuardSettings(allowed_hosts=hosts, trusted_origins=trusted)

    assert guard.transport_security(settings).enable_dns_rebinding_protection is False


def test_the_standalone_server_reads_the_variables_the_site_reads(monkeypatch):
    monkeypatch.setenv("ALLOWED_HOSTS", "tau2.example.org, .hf.space")
    monkeypatch.setenv("CSRF_TRUSTED_ORIGINS", "https://tau2.example.org")
    monkeypatch.setenv("TAU2_AGENT_API_MAX_BODY_BYTES", "65536")

    assert GuardSettings.from_config() == GuardSettings(
        allowed_hosts=("tau2.example.org", ".hf.space"),
        trusted_origins=("https://tau2.example.org",),
        max_body_bytes=65536,
    )


def test_the_standalone_server_answers_only_loopback_names_by_default(monkeypatch):
    for name in ("ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS", "TAU2_AGENT_API_MAX_BODY_BYTES"):
        monkeypatch.delenv(name, raising=False)

    settings = GuardSettings.from_config()

    assert settings.allowed_hosts == ("localhost", "127.0.0.1", "[::1]")
    assert settings.trusted_origins == () and settings.max_body_bytes == 1024 * 1024

"""The agent faces' front door: what a request must be before a face reads it.

:class:`AgentFaceGuard` wraps an agent face's ASGI app (OpenEnv's, the MCP server's) and
refuses, before the face sees anything:

* a **Host** that is not one of the allowed hosts, read as Django reads ``ALLOWED_HOSTS``
  (exact names, ``.example.org`` for a domain and its subdomains, ``*`` for any) — what
  defeats DNS rebinding, where a hostile page's own name resolves to this server;
* a browser's **Origin** other than the site's own (the scheme, host and port the request
  was sent to) or one of the trusted origins (``CSRF_TRUSTED_ORIGINS``), as Django's CSRF
  check decides. Browsers send ``Origin`` on every WebSocket and on every cross-site POST;
  clients that are not browsers send none, and pass;
* a **POST body that is not** ``application/json`` (415): ``text/plain`` and forms are the
  bodies a page may send to another site without a CORS preflight;
* a **body larger** than ``max_body_bytes`` (413), and a JSON body or WebSocket text frame
  that the bounded reader (:func:`tau2_env.jsonbounds.loads`) refuses — too deep, an
  integer too long, a NUL, not JSON — with its reason (400, or 413 when too large);
* a **WebSocket where the face serves none** (``/agent/mcp`` speaks streamable HTTP only).

A refusal speaks the face's protocol: over HTTP OpenEnv's ``{"detail": …}``, or a JSON-RPC
error where the body is JSON-RPC (``/mcp``, ``/agent/mcp``); a WebSocket is refused before
it is accepted (the server answers 403); a frame refused on an open socket is answered
with an error frame of the socket's protocol — OpenEnv's ``{"type": "error", …}`` on
``/ws``, which its client raises as an error and after which the socket goes on, or a
JSON-RPC error on OpenEnv's ``WS /mcp`` — and never reaches the face.

``GET /health`` passes unchecked: it spends and reveals nothing, and container health
checks ask for it by address (``127.0.0.1``), which is no allowed host in production.

Framework-free: the web project passes Django's settings in (``tau2site.asgi``); the
standalone server reads the same variables through :mod:`tau2_env.config`
(:meth:`GuardSettings.from_config`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings

from tau2_env import config, jsonbounds

__all__ = [
    "MCP_FACE",
    "OPENENV_FACE",
    "AgentFaceGuard",
    "Face",
    "GuardSettings",
    "Refused",
    "host_allowed",
    "origin_allowed",
    "transport_security",
]

# The methods whose bodies the faces read.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
UNCHECKED = frozenset({("GET", "/health"), ("HEAD", "/health")})
JSON_MEDIA_TYPE = "application/json"
# JSON-RPC's codes: the reader refused to parse the body; the request itself is refused.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600

FrameDialect = Literal["openenv", "jsonrpc"]
# Django's ``host_validation_re``: a name, or an IPv6 literal in brackets, and a port.
_HOST = re.compile(r"([a-z0-9.-]+|\[[a-f0-9]*:[a-f0-9.:]+\])(?::([0-9]+))?")


@dataclass(frozen=True)
class GuardSettings:
    """What the guard accepts.

    ``allowed_hosts``: Django's ``ALLOWED_HOSTS`` patterns; ``trusted_origins``: Django's
    ``CSRF_TRUSTED_ORIGINS`` (``https://*.example.org`` for any subdomain);
    ``max_body_bytes``: the largest HTTP body or WebSocket frame; ``proxy_ssl_header``:
    the header (lower case) and value a TLS-terminating proxy sets on HTTPS requests
    (Django's ``SECURE_PROXY_SSL_HEADER``), or ``None``.
    """

    allowed_hosts: tuple[str, ...]
    trusted_origins: tuple[str, ...] = ()
    max_body_bytes: int = config.DEFAULT_AGENT_API_MAX_BODY_BYTES
    proxy_ssl_header: tuple[str, str] | None = None

    @classmethod
    def from_config(cls) -> GuardSettings:
        """The standalone server's settings (``uvicorn tau2_env.faces.server:app``), from the
        variables the web project reads too: ``ALLOWED_HOSTS`` (default: the loopback
        names), ``CSRF_TRUSTED_ORIGINS`` and ``TAU2_AGENT_API_MAX_BODY_BYTES``."""
        return cls(
            allowed_hosts=tuple(config.allowed_hosts()),
            trusted_origins=tuple(config.trusted_origins()),
            max_body_bytes=config.agent_api_max_body_bytes(),
        )

    def refusal(self, scope) -> Refused | None:
        """Why the request of ``scope`` may not reach a face (its Host, its Origin), or
        ``None`` when it may."""
        host = _header(scope, b"host")
        # Django's DisallowedHost is a 400; so is this.
        if not host:
            return Refused(400, "Invalid Host header: the request names no host.")
        if not host_allowed(host, self.allowed_hosts):
            return Refused(400, f"Invalid Host header: {host!r} is not an allowed host.")
        origin = _header(scope, b"origin")
        if origin is not None and not origin_allowed(
            origin, host=host, secure=self.is_secure(scope), trusted_origins=self.trusted_origins
        ):
            return Refused(
                403, f"Cross-site request refused: Origin {origin!r} is not this site's."
            )
        return None

    def is_secure(self, scope) -> bool:
        """True when the request came over TLS, directly or (as ``proxy_ssl_header``
        says) through the proxy in front."""
        if scope.get("scheme") in ("https", "wss"):
            return True
        if self.proxy_ssl_header is None:
            return False
        name, expected = self.proxy_ssl_header
        value = _header(scope, name.encode("latin-1"))
        return value is not None and value.split(",")[0].strip() == expected


@dataclass(frozen=True)
class Refused:
    """A refusal: the HTTP status and the reason, for a person."""

    status: int
    reason: str
    jsonrpc_code: int = INVALID_REQUEST


@dataclass(frozen=True)
class Face:
    """How a face speaks: the HTTP paths whose bodies are JSON-RPC (``"*"``: all of
    them), and the paths where it serves WebSockets, each with its frames' dialect."""

    jsonrpc_paths: frozenset[str] = frozenset()
    sockets: Mapping[str, FrameDialect] = field(default_factory=dict)

    def speaks_jsonrpc(self, path: str) -> bool:
        return "*" in self.jsonrpc_paths or path in self.jsonrpc_paths


# OpenEnv's app (tau2_env.faces.server): JSON-RPC on /mcp, its sessions on WS /ws, JSON-RPC on
# WS /mcp. The MCP server (tau2_env.faces.mcp_server): JSON-RPC everywhere, no WebSocket.
OPENENV_FACE = Face(
    jsonrpc_paths=frozenset({"/mcp"}), sockets={"/ws": "openenv", "/mcp": "jsonrpc"}
)
MCP_FACE = Face(jsonrpc_paths=frozenset({"*"}))


# --- Host and Origin, as Django decides them -------------------------------------------------


def _split_host(host: str) -> str:
    """The domain of a Host header (lower case, port and trailing dot off), or "" when it
    is not a valid host — ``django.http.request.split_domain_port``."""
    match = _HOST.fullmatch(host.lower())
    return match[1].removesuffix(".") if match else ""


def _same_domain(host: str, pattern: str) -> bool:
    """``django.utils.http.is_same_domain``: ``.example.org`` matches the domain and its
    subdomains, anything else only itself."""
    if not pattern:
        return False
    pattern = pattern.lower()
    if pattern[0] == ".":
        return host.endswith(pattern) or host == pattern[1:]
    return host == pattern


def host_allowed(host: str, allowed_hosts: tuple[str, ...] | list[str]) -> bool:
    """True when the Host header ``host`` (with or without a port) names one of
    ``allowed_hosts`` — Django's ``validate_host`` on ``split_domain_port``."""
    domain = _split_host(host)
    return bool(domain) and any(
        pattern == "*" or _same_domain(domain, pattern) for pattern in allowed_hosts
    )


def origin_allowed(
    origin: str, *, host: str, secure: bool, trusted_origins: tuple[str, ...] | list[str]
) -> bool:
    """True when a browser's ``origin`` is the site's own — the scheme (``https`` when
    ``secure``), host and port the request was sent to — or trusted: one of
    ``trusted_origins``, or a subdomain of one written ``scheme://*.domain`` (Django's
    ``CsrfViewMiddleware._origin_verified``, for a Host already allowed)."""
    if origin == f"{'https' if secure else 'http'}://{host}":
        return True
    if origin in trusted_origins:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(
        _same_domain(parsed.netloc, pattern.netloc.lstrip("*"))
        for pattern in map(urlsplit, (t for t in trusted_origins if "*" in t))
        if pattern.scheme == parsed.scheme
    )


def transport_security(settings: GuardSettings) -> TransportSecuritySettings:
    """The MCP SDK's DNS-rebinding protection for ``settings``: the same hosts and
    origins, in the SDK's patterns (an exact ``host`` or ``host:*`` for any port).

    The SDK has no pattern for ``*`` or for a domain's subdomains (``.example.org``,
    ``https://*.example.org``): with one of those its protection is off rather than
    refusing what the guard accepts, and the guard in front holds the check alone.
    """
    hosts = [h.lower() for h in settings.allowed_hosts]
    if any(h == "*" or h.startswith(".") for h in hosts) or any(
        "*" in o for o in settings.trusted_origins
    ):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    any_port = [f"{h}{port}" for h in hosts for port in ("", ":*")]
    origins = [f"{scheme}://{h}" for h in any_port for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=any_port,
        allowed_origins=[*origins, *settings.trusted_origins],
    )


# --- The ASGI guard -------------------------------------------------------------------------


class AgentFaceGuard:
    """Refuses what a face must not see (see the module docstring) and passes the rest,
    bodies and frames unchanged, to ``app``. ``settings`` is called per connection, so a
    changed setting applies at once."""

    def __init__(self, app, *, face: Face, settings: Callable[[], GuardSettings]) -> None:
        self.app = app
        self.face = face
        self.settings = settings

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            return await self._http(scope, receive, send)
        if scope["type"] == "websocket":
            return await self._websocket(scope, receive, send)
        return await self.app(scope, receive, send)  # lifespan

    async def _http(self, scope, receive, send) -> None:
        path = scope.get("path", "").rstrip("/") or "/"
        method = scope.get("method", "GET")
        jsonrpc = self.face.speaks_jsonrpc(path)
        if (method, path) in UNCHECKED:
            return await self.app(scope, receive, send)
        settings = self.settings()
        refused = settings.refusal(scope)
        if refused is None and method in BODY_METHODS:
            refused, receive = await _checked_body(scope, receive, settings.max_body_bytes)
        if refused is not None:
            return await _refuse_http(send, refused, jsonrpc=jsonrpc)
        return await self.app(scope, receive, send)

    async def _websocket(self, scope, receive, send) -> None:
        path = scope.get("path", "").rstrip("/") or "/"
        dialect = self.face.sockets.get(path)
        settings = self.settings()
        refused = settings.refusal(scope)
        if refused is None and dialect is None:
            refused = Refused(403, f"No WebSocket is served at {path}: it speaks HTTP only.")
        if refused is not None:
            return await _refuse_websocket(receive, send, refused)
        assert dialect is not None  # refused above otherwise
        limit = settings.max_body_bytes

        async def checked_receive():
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                frame = message.get("text")
                if frame is None:
                    frame = message.get("bytes") or b""
                try:
                    jsonbounds.loads(frame, max_bytes=limit)
                except jsonbounds.JsonRefused as exc:
                    reason = f"The frame {exc.detail}"
                    await send({"type": "websocket.send", "text": _error_frame(dialect, reason)})
                    continue
                return message

        return await self.app(scope, checked_receive, send)


async def _checked_body(scope, receive, limit: int):
    """``(refusal, receive)``: why the body may not reach the face (its type, its size,
    what the bounded reader says of it), else ``None`` and a ``receive`` replaying it."""
    media_type = _media_type(_header(scope, b"content-type"))
    declared = _header(scope, b"content-length")
    if media_type is not None and media_type != JSON_MEDIA_TYPE:
        return _unsupported(media_type), receive
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return _too_large(limit), receive
    chunks: list[bytes] = []
    size = 0
    trailing = None
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client went away
            trailing = message
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return _too_large(limit), receive
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    if body and media_type is None:
        return _unsupported(None), receive
    if body:
        try:
            jsonbounds.loads(body, max_bytes=limit)
        except jsonbounds.JsonRefused as exc:
            return Refused(exc.status, f"The body {exc.detail}", jsonrpc_code=PARSE_ERROR), receive
    replay = [{"type": "http.request", "body": body, "more_body": False}]
    if trailing is not None:
        replay.append(trailing)

    async def replayed():
        return replay.pop(0) if replay else await receive()

    return None, replayed


def _media_type(content_type: str | None) -> str | None:
    if content_type is None:
        return None
    return content_type.split(";", 1)[0].strip().lower()


def _unsupported(media_type: str | None) -> Refused:
    given = f"not {media_type!r}" if media_type else "and this one has no Content-Type"
    return Refused(415, f"Unsupported media type: the body must be {JSON_MEDIA_TYPE}, {given}.")


def _too_large(limit: int) -> Refused:
    return Refused(413, f"The body is larger than {limit:,} bytes.")


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _jsonrpc_error(code: int, message: str) -> dict[str, Any]:
    # No request id to answer: the request was not read.
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


async def _refuse_http(send, refused: Refused, *, jsonrpc: bool) -> None:
    payload = (
        _jsonrpc_error(refused.jsonrpc_code, refused.reason)
        if jsonrpc
        else {"detail": refused.reason}
    )
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": refused.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _refuse_websocket(receive, send, refused: Refused) -> None:
    """A close before the handshake completes, which the server answers with 403.

    Not ASGI's denial response (``websocket.http.response``), which could carry the
    reason: uvicorn's default WebSocket implementation (websockets-sansio, 0.54) logs
    every such refusal as an ERROR, "ASGI callable returned without completing
    handshake" (Kludex/uvicorn#3138), and a refusal is no server error."""
    message = await receive()
    if message["type"] == "websocket.connect":
        await send({"type": "websocket.close", "code": 1008, "reason": refused.reason[:120]})


def _error_frame(dialect: FrameDialect, reason: str) -> str:
    """A refused frame's answer in the socket's protocol: OpenEnv's error frame (its
    client raises it as ``Server error: … (code: INVALID_JSON)``) or a JSON-RPC error."""
    if dialect == "jsonrpc":
        return json.dumps(_jsonrpc_error(PARSE_ERROR, reason))
    return json.dumps({"type": "error", "data": {"message": reason, "code": "INVALID_JSON"}})

"""The OpenEnv HTTP/WebSocket application of the engine.

:func:`create_openenv_app` builds openenv's FastAPI routes (``/ws``, ``/reset``,
``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp``, ``/docs``,
``/openapi.json``) over :class:`~tau2_env.openenv_env.Tau2Environment`, wrapped in a
small ASGI layer (:class:`OpenEnvApp`) that adds what openenv leaves open:

* **Credentials** through one function, :func:`tau2_env.access.resolve_credentials`
  (the request's headers and address are made the ``current_request`` of the
  connection; the web project can install its own resolver).
* **Capacity**: every session (a ``/ws`` connection, an ``openenv/session/create``)
  holds a slot of a shared :class:`~tau2_env.capacity.SessionSlots` — a total, a cap
  per client — and a refusal carries ``retry_after`` (seconds). A WebSocket that waits
  ``TAU2_SESSION_IDLE_SECONDS`` for its client is closed (code 1001); a session over
  HTTP is reaped by openenv after the same time.
* **Inputs**: tool arguments given as a JSON string are read as the object they hold
  (as the original OpenEnv Space's server accepted them); a step's action given as text
  is read as τ²'s gym reads it (:func:`text_action`: a tool call, else
  ``respond_to_user``); a bad ``/reset`` or ``/step`` answers 4xx JSON ``{"detail": …}``,
  never 500; the original Space's environment name (``tau2_env``) is accepted in the Task
  API's paths as well as ``tau2``.

openenv's session hooks are private: :func:`tau2_env.compat.openenv_server_class` holds
them (for the tested openenv only), and :func:`tau2_env.compat.with_capacity_details`
knows openenv's refusal frames.

The project's ASGI application mounts it beside Django and must forward lifespan events
to it: openenv starts its idle-session reaper on startup.

Standalone: ``uvicorn tau2_env.server:app`` (the module attribute ``app`` is built on
first access, so importing this module stays cheap).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from openenv.core.env_server.exceptions import EnvironmentFactoryError, SessionCapacityError
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import ConcurrencyConfig

from tau2_env import access, compat
from tau2_env.agent_session import BadRequest
from tau2_env.capacity import CapacityReached, SessionSlots, Slot
from tau2_env.openenv_env import Tau2Environment, Tau2State, Tau2ToolObservation

__all__ = [
    "ENV_NAME",
    "ENV_NAME_ALIASES",
    "OpenEnvApp",
    "create_openenv_app",
    "set_credentials_resolver",
]

ENV_NAME = "tau2"
# The original OpenEnv Space's package was ``tau2_env`` (the Space ``tau2-env``): clients
# written for it send that name.
ENV_NAME_ALIASES = ("tau2_env", "tau2-env")

set_credentials_resolver = access.set_credentials_resolver


@dataclass
class _Call:
    """What the ASGI layer knows of the connection being served."""

    kind: str  # "http" or "websocket"
    refusal: CapacityReached | None = None


_call: ContextVar[_Call | None] = ContextVar("tau2_openenv_call", default=None)


class _SlotHooks:
    """openenv's sessions, each holding a slot (:class:`tau2_env.compat.OpenEnvSessionHooks`)."""

    def __init__(self, slots: SessionSlots) -> None:
        self.slots = slots

    def admit(self) -> tuple[Slot, bool]:
        call = _call.get()
        try:
            credentials = access.resolve_credentials(access.current_request())
        except access.CredentialsRefused as exc:
            raise EnvironmentFactoryError(ENV_NAME, str(exc)) from None
        try:
            slot = self.slots.acquire(credentials.client)
        except CapacityReached as exc:
            if call is not None:
                call.refusal = exc
            raise SessionCapacityError(exc.active, exc.limit, str(exc)) from None
        # A WebSocket's own idle timeout closes it (OpenEnvApp); openenv's reaper must not
        # close a session under a live WebSocket (mid-turn, say).
        return slot, call is not None and call.kind == "websocket"

    def touch(self, slot: Slot) -> None:
        self.slots.touch(slot)

    def release(self, slot: Slot) -> None:
        self.slots.release(slot)


def _bad_request(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=getattr(exc, "status", 400))


def create_openenv_app(
    slots: SessionSlots | None = None, *, swagger_assets: str | None = None
) -> OpenEnvApp:
    """A new ASGI app serving OpenEnv's API for τ²-bench.

    ``/docs`` is Swagger UI; ``swagger_assets`` is the URL of a ``swagger-ui-dist``
    folder this site serves (default: FastAPI's, from a CDN).

    ``slots`` (shared with the MCP face; default :meth:`SessionSlots.from_config`)
    bound the sessions: ``MAX_CONCURRENT_ENVS`` in all, ``TAU2_SESSIONS_PER_CLIENT`` per
    client, closed after ``TAU2_SESSION_IDLE_SECONDS`` idle. ``TAU2_DOMAIN`` and
    ``TAU2_SPLIT`` are read at each reset, so one server serves every domain. Starts
    without any credentials configured (``reset`` then explains what is missing).
    """
    compat.install()
    slots = slots or SessionSlots.from_config()
    api = FastAPI(
        title="τ²-bench OpenEnv API",
        version="1.0.0",
        description=(
            "τ²-bench customer-service conversations as an OpenEnv environment: "
            "`reset` starts an episode, `step` calls the domain's tools, `respond_to_user` "
            "and `done`; the final observation carries τ²-bench's reward and breakdown. "
            "Stateful sessions over the `/ws` WebSocket."
        ),
        docs_url=None if swagger_assets else "/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
    )
    server = compat.openenv_server_class()(
        Tau2Environment,
        CallToolAction,
        Tau2ToolObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=slots.total, session_timeout=float(slots.idle_seconds)
        ),
        env_name=ENV_NAME,
        state_cls=Tau2State,
        hooks=_SlotHooks(slots),
    )
    server.register_routes(api, mode="simulation")
    if swagger_assets:
        api.add_api_route("/docs", _swagger_page(api, swagger_assets), include_in_schema=False)
    api.add_exception_handler(BadRequest, _bad_request)
    return OpenEnvApp(api, slots=slots)


class OpenEnvApp:
    """The ASGI layer around openenv's FastAPI app (see the module docstring)."""

    # The Task API paths that name the environment: ``/<name>/splits`` and the like.
    _NAMED = tuple(f"/{alias}/" for alias in ENV_NAME_ALIASES)

    def __init__(self, api: FastAPI, *, slots: SessionSlots) -> None:
        self.api = api
        self.slots = slots

    async def __call__(self, scope, receive, send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            return await self.api(scope, receive, send)
        path = scope.get("path", "")
        if path.startswith(self._NAMED):
            path = f"/{ENV_NAME}/" + path.split("/", 2)[2]
            scope = {**scope, "path": path, "raw_path": path.encode()}
        call = _Call(kind=kind)
        token = _call.set(call)
        try:
            with access.serving(access.ClientRequest.from_scope(scope, face="openenv")):
                if kind == "websocket":
                    receive = self._websocket_receive(receive, send)
                    send = self._websocket_send(send, call)
                else:
                    if scope.get("method") == "POST" and path.rstrip("/") in ("/step", "/mcp"):
                        receive = _json_body_receive(receive)
                    send = _http_send(send, call)
                await self.api(scope, receive, send)
        finally:
            _call.reset(token)

    def _websocket_receive(self, receive, send):
        """Frames with tool arguments as JSON text read as objects; an idle client is
        disconnected after the slots' idle time."""
        idle = self.slots.idle_seconds

        async def wrapped():
            try:
                message = await asyncio.wait_for(receive(), timeout=idle)
            except TimeoutError:
                await send(
                    {
                        "type": "websocket.close",
                        "code": 1001,
                        "reason": f"Idle for {idle} s: session closed.",
                    }
                )
                return {"type": "websocket.disconnect", "code": 1001}
            if message.get("type") == "websocket.receive" and message.get("text"):
                message = {**message, "text": _normalized(message["text"])}
            return message

        return wrapped

    @staticmethod
    def _websocket_send(send, call: _Call):
        async def wrapped(message):
            refusal = call.refusal
            if refusal is not None and message.get("type") == "websocket.send":
                text = compat.with_capacity_details(message.get("text") or "", refusal.details())
                if text is not None:
                    message = {**message, "text": text}
            await send(message)

        return wrapped


def _swagger_page(api: FastAPI, assets: str):
    """The ``/docs`` view: Swagger UI from ``assets``, its inline script allowed by hash."""
    page = get_swagger_ui_html(
        openapi_url="/openapi.json",
        title=f"{api.title} — docs",
        swagger_js_url=f"{assets}/swagger-ui-bundle.js",
        swagger_css_url=f"{assets}/swagger-ui.css",
        swagger_favicon_url=f"{assets}/favicon-32x32.png",
    )
    html = bytes(page.body).decode()
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in re.findall(r"<script>(.*?)</script>", html, re.S)
    )
    policy = (
        f"default-src 'self'; script-src 'self' {hashes}; style-src 'self'; "
        "img-src 'self' data:; frame-ancestors 'none'"
    )

    def docs() -> HTMLResponse:
        return HTMLResponse(html, headers={"content-security-policy": policy})

    return docs


def _http_send(send, call: _Call):
    """Adds ``retry_after`` (and a ``Retry-After`` header) to a capacity refusal."""
    held: dict[str, Any] = {}

    async def wrapped(message):
        refusal = call.refusal
        if refusal is None:
            return await send(message)
        if message["type"] == "http.response.start":
            held["start"] = message
            return None
        if message["type"] == "http.response.body" and "start" in held:
            body = message.get("body", b"")
            text = compat.with_capacity_details(body, refusal.details())
            if text is not None:
                body = text.encode()
            start = held.pop("start")
            headers = [
                (k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"
            ]
            headers += [
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", str(refusal.retry_after).encode()),
            ]
            await send({**start, "headers": headers})
            return await send({**message, "body": body})
        return await send(message)

    return wrapped


def _json_body_receive(receive):
    """The request body with tool arguments given as JSON text read as objects."""
    chunks: list[bytes] = []
    done = False

    async def wrapped():
        nonlocal done
        if done:
            return await receive()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return message
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        done = True
        body = b"".join(chunks)
        with contextlib.suppress(UnicodeDecodeError):
            body = _normalized(body.decode()).encode()
        return {"type": "http.request", "body": body, "more_body": False}

    return wrapped


def _normalized(text: str) -> str:
    """``text`` (a JSON message of any OpenEnv transport) with a ``call_tool``'s or
    ``tools/call``'s ``arguments`` given as a JSON string replaced by the object it
    holds, and a step's text action by its ``call_tool`` (:func:`text_action`); anything
    else is returned as it came."""
    try:
        message = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(message, dict):
        return text
    changed = _read_text_action(message)
    data = message.get("data")
    targets = [
        message.get("action"),  # HTTP /step
        data,  # WebSocket step
        message.get("params"),  # JSON-RPC tools/call
        data.get("params") if isinstance(data, dict) else None,  # JSON-RPC over /ws
    ]
    for target in targets:
        if isinstance(target, dict) and isinstance(target.get("arguments"), str):
            try:
                value = json.loads(target["arguments"])
            except (ValueError, RecursionError):
                continue
            if isinstance(value, dict):
                target["arguments"] = value
                changed = True
    return json.dumps(message) if changed else text


def _read_text_action(message: dict[str, Any]) -> bool:
    """A step whose action is text — HTTP ``{"action": "…"}``, WebSocket ``{"type":
    "step", "data": "…"}`` or ``{"data": {"action": "…"}}`` (what openenv's client sends
    for ``step("…")``) — gets the action :func:`text_action` reads in it, in place."""
    if message.get("type") == "step":
        data = message.get("data")
        if isinstance(data, dict) and set(data) == {"action"}:
            data = data["action"]
        if isinstance(data, str):
            message["data"] = text_action(data)
            return True
    elif isinstance(message.get("action"), str) and "type" not in message:
        message["action"] = text_action(message["action"])
        return True
    return False


def text_action(text: str) -> dict[str, Any]:
    """The ``call_tool`` action of a gym-style text action, read as τ²'s own gym
    (``AgentGymEnv.step``, through ``tau2.utils.tools.parse_action_string``) reads it: a
    tool call as JSON (``{"name": …, "arguments": {…}}``) or in functional form
    (``get_user_details(user_id='…')``) is that tool call; anything else is said to the
    customer, i.e. ``respond_to_user(message=<the text as given>)``."""
    from tau2.utils.tools import parse_action_string

    try:
        parsed = parse_action_string(text)
    except ValueError:  # empty text: respond_to_user refuses it with its own message
        parsed = None
    if parsed is not None and parsed.tool_calls:
        (call,) = parsed.tool_calls
        return {"type": "call_tool", "tool_name": call.name, "arguments": call.arguments}
    return {"type": "call_tool", "tool_name": "respond_to_user", "arguments": {"message": text}}


_app: Any = None


def __getattr__(name: str) -> Any:
    # ``app`` for ``uvicorn tau2_env.server:app``; built once, on first use.
    global _app
    if name == "app":
        if _app is None:
            _app = create_openenv_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

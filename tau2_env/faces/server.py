"""The OpenEnv HTTP/WebSocket application of the engine.

:func:`create_openenv_app` builds openenv's FastAPI routes (``/ws``, ``/reset``,
``/step``, ``/state``, ``/schema``, ``/metadata``, ``/health``, ``/mcp``, ``/docs``,
``/openapi.json``) over :class:`~tau2_env.faces.openenv_env.Tau2Environment`, wrapped in a
small ASGI layer (:class:`OpenEnvApp`) that adds what openenv leaves open:

* **Credentials** through one function, :func:`tau2_env.gate.access.resolve_credentials`
  (the request's headers and address are made the ``current_request`` of the
  connection; the web project can install its own resolver).
* **Sessions belong to their opener**: a session answers only the credential that
  opened it (:attr:`tau2_env.gate.access.Credentials.holder`). A ``/mcp`` request naming
  another's session (``tools/call``, ``openenv/session/close``…), or none that exists,
  gets 404 and the JSON-RPC error openenv gives an unknown session; a ``/ws`` asking to
  attach to one is refused before it is accepted; a WebSocket frame naming one gets
  that error frame. Nothing runs.
* **Capacity**: every session (a ``/ws`` connection, an ``openenv/session/create``)
  holds a slot of a shared :class:`~tau2_env.gate.capacity.SessionSlots` — a total, a cap
  per client — granted once its credentials are resolved (a refused one holds
  nothing), and a refusal carries ``retry_after`` (seconds). A WebSocket that waits
  ``TAU2_SESSION_IDLE_SECONDS`` for its client is closed (code 1001); a session over
  HTTP is reaped by openenv after the same time.
* **Revocation**: every ``TAU2_CREDENTIALS_CHECK_SECONDS`` (default 2) the open
  sessions' credentials are checked again (:meth:`SessionSlots.watch`); a session
  whose key was revoked (or whose person signed out) is closed — a WebSocket with code
  1008 and the reason.
* **Inputs**: tool arguments given as a JSON string are read as the object they hold
  (as the original OpenEnv Space's server accepted them); a step's action given as text
  is read as τ²'s gym reads it (:func:`text_action`: a tool call, else
  ``respond_to_user``); a bad ``/reset`` or ``/step`` answers 4xx JSON ``{"detail": …}``,
  never 500; the original Space's environment name (``tau2_env``) is accepted in the Task
  API's paths as well as ``tau2``.

openenv's session hooks are private: :func:`tau2_env.llm.compat.openenv_server_class` holds
them (for the tested openenv only), and :func:`tau2_env.llm.compat.with_capacity_details`
knows openenv's refusal frames.

The project's ASGI application mounts it beside Django and must forward lifespan events
to it: openenv starts its idle-session reaper on startup.

Standalone: ``uvicorn tau2_env.faces.server:app`` (the module attribute ``app`` is built on
first access, so importing this module stays cheap), behind
:class:`tau2_env.gate.guard.AgentFaceGuard` configured from the environment.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from openenv.core.env_server.exceptions import EnvironmentFactoryError, SessionCapacityError
from openenv.core.env_server.mcp_types import CallToolAction, JsonRpcErrorCode, JsonRpcResponse
from openenv.core.env_server.types import ConcurrencyConfig

from tau2_env import config
from tau2_env.faces.agent_session import BadRequest
from tau2_env.faces.openenv_env import Tau2Environment, Tau2State, Tau2ToolObservation
from tau2_env.gate import access, guard, shared_slots
from tau2_env.gate.capacity import CapacityReached, SessionSlots, Slot
from tau2_env.llm import compat

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
    """What the ASGI layer knows of the connection being served: its credentials once
    resolved (or why they were refused), the slot its session holds."""

    kind: str  # "http" or "websocket"
    refusal: CapacityReached | None = None
    credentials: access.Credentials | None = None
    refused: access.CredentialsRefused | None = None
    slot: Slot | None = None


_call: ContextVar[_Call | None] = ContextVar("tau2_openenv_call", default=None)


class _SlotHooks:
    """openenv's sessions, each holding a slot
    (:class:`tau2_env.llm.compat.OpenEnvSessionHooks`)."""

    def __init__(self, slots: SessionSlots) -> None:
        self.slots = slots
        self.server: Any = None  # the openenv server these hooks are for (set once built)

    async def admit(self) -> tuple[Slot, bool]:
        call = _call.get()
        try:
            credentials = await _credentials_of(call)
        except access.CredentialsRefused as exc:
            raise EnvironmentFactoryError(ENV_NAME, str(exc)) from None
        try:
            slot = self.slots.acquire(
                credentials.client,
                limit=credentials.limit,
                owner=credentials.holder,
                check=credentials.check,
            )
        except CapacityReached as exc:
            if call is not None:
                call.refusal = exc
            raise SessionCapacityError(exc.active, exc.limit, str(exc)) from None
        websocket = call is not None and call.kind == "websocket"
        if websocket and call is not None:
            call.slot = slot
        # A WebSocket's own idle timeout closes it (OpenEnvApp); openenv's reaper must not
        # close a session under a live WebSocket (mid-turn, say).
        return slot, websocket

    def opened(self, slot: Slot, session_id: str) -> None:
        server = self.server

        async def close(reason: str) -> None:
            await server.close_session(session_id, reason=reason)

        slot.on_end = close

    def touch(self, slot: Slot) -> None:
        self.slots.touch(slot)

    def release(self, slot: Slot) -> None:
        self.slots.release(slot)


async def _credentials_of(call: _Call | None) -> access.Credentials:
    """The credentials of the request being served, resolved once per connection;
    raises :class:`~tau2_env.gate.access.CredentialsRefused`."""
    if call is not None and call.refused is not None:
        raise call.refused
    if call is not None and call.credentials is not None:
        return call.credentials
    try:
        credentials = await access.resolve_credentials_async(access.current_request())
    except access.CredentialsRefused as exc:
        if call is not None:
            call.refused = exc
        raise
    if call is not None:
        call.credentials = credentials
    return credentials


_SESSION_ID_IN_URL = re.compile(r"(session_id=)[^&\s\"]+")


class RedactSessionIds(logging.Filter):
    """Replaces the value of ``session_id=`` in a log record's arguments (uvicorn logs a
    request's path with its query: ``/ws?session_id=…``) by ``…``: a session id is a
    capability to its owner's session, and logs are read by more people than sessions."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) for a in record.args):
            record.args = tuple(
                _SESSION_ID_IN_URL.sub(r"\1…", a) if isinstance(a, str) else a for a in record.args
            )
        if isinstance(record.msg, str) and "session_id=" in record.msg:
            record.msg = _SESSION_ID_IN_URL.sub(r"\1…", record.msg)
        return True


def redact_session_ids_in_server_logs() -> None:
    """Install :class:`RedactSessionIds` on uvicorn's loggers (once)."""
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSessionIds) for f in logger.filters):
            logger.addFilter(RedactSessionIds())


def _bad_request(request: Request, exc: Exception) -> JSONResponse:
    status = getattr(exc, "status", 400)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is None and status == 503:
        retry_after = access.RETRY_AFTER
    headers = {"retry-after": str(retry_after)} if retry_after is not None else None
    body: dict[str, Any] = {"detail": str(exc)}
    if getattr(exc, "data", None):
        body["data"] = exc.data  # type: ignore[attr-defined]
    if retry_after is not None:
        body["retry_after"] = retry_after
    return JSONResponse(body, status_code=status, headers=headers)


def create_openenv_app(
    slots: SessionSlots | None = None, *, swagger_assets: str | None = None
) -> OpenEnvApp:
    """A new ASGI app serving OpenEnv's API for τ²-bench.

    ``/docs`` is Swagger UI; ``swagger_assets`` is the URL of a ``swagger-ui-dist``
    folder this site serves (default: FastAPI's, from a CDN).

    ``slots`` (shared with the MCP face; default
    :func:`tau2_env.gate.shared_slots.session_slots_from_config`: across hosts with
    ``TAU2_SLOTS_URL``, across the router's processes with ``TAU2_SLOTS_LEDGER``) bound
    the sessions:
    ``MAX_CONCURRENT_ENVS`` in all (per process), ``TAU2_SESSIONS_PER_CLIENT`` per
    client, closed after ``TAU2_SESSION_IDLE_SECONDS`` idle. ``TAU2_DOMAIN`` and
    ``TAU2_SPLIT`` are read at each reset, so one server serves every domain. Starts
    without any credentials configured (``reset`` then explains what is missing).
    """
    compat.install()
    redact_session_ids_in_server_logs()
    slots = slots or shared_slots.session_slots_from_config()
    hooks = _SlotHooks(slots)
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
        hooks=hooks,
    )
    hooks.server = server
    server.register_routes(api, mode="simulation")
    if swagger_assets:
        api.add_api_route("/docs", _swagger_page(api, swagger_assets), include_in_schema=False)
    api.add_exception_handler(BadRequest, _bad_request)
    watcher = _CredentialsWatcher(slots)
    api.router.on_startup.append(watcher.start)
    api.router.on_shutdown.append(watcher.stop)
    return OpenEnvApp(api, slots=slots, server=server)


class _CredentialsWatcher:
    """Runs :meth:`SessionSlots.watch` on the serving loop from startup to shutdown."""

    def __init__(self, slots: SessionSlots) -> None:
        self.slots = slots
        self.task: asyncio.Task | None = None

    async def start(self) -> None:
        if self.task is None:
            interval = float(config._env_int("TAU2_CREDENTIALS_CHECK_SECONDS", 2))
            self.task = asyncio.create_task(self.slots.watch(interval=interval))

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
            self.task = None


class OpenEnvApp:
    """The ASGI layer around openenv's FastAPI app (see the module docstring)."""

    # The Task API paths that name the environment: ``/<name>/splits`` and the like.
    _NAMED = tuple(f"/{alias}/" for alias in ENV_NAME_ALIASES)

    def __init__(self, api: FastAPI, *, slots: SessionSlots, server: Any) -> None:
        self.api = api
        self.slots = slots
        self.server = server

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
                    await self._websocket(scope, receive, send, call)
                    return
                if scope.get("method") == "POST" and path.rstrip("/") in ("/step", "/mcp"):
                    body = await _read_body(receive)
                    if path.rstrip("/") == "/mcp":
                        refusal = await self._foreign_session(body, call)
                        if refusal is not None:
                            return await _json_response(send, *refusal)
                    receive = _replay(body, receive)
                await self.api(scope, receive, _http_send(send, call))
        finally:
            _call.reset(token)

    # ------------------------------------------------------------ ownership

    def _owned_slot(self, session_id: Any, owner: str) -> Slot | None:
        """The slot of ``session_id`` if it is open and ``owner``'s, else ``None``."""
        if not isinstance(session_id, str):
            return None
        slot = self.server.held_by(session_id)
        return slot if isinstance(slot, Slot) and slot.owner == owner else None

    async def _foreign_session(self, body: bytes, call: _Call) -> tuple[int, dict] | None:
        """(status, JSON) refusing a JSON-RPC body that names a session not the
        caller's (401 for refused credentials, 404 as for an unknown session), or ``None``."""
        message = _json_object(body)
        if message is None:
            return None
        params = message.get("params")
        if not isinstance(params, dict) or "session_id" not in params:
            return None
        session_id = params["session_id"]
        try:
            credentials = await _credentials_of(call)
        except access.CredentialsRefused as exc:
            error = JsonRpcResponse.error_response(
                JsonRpcErrorCode.INVALID_REQUEST, str(exc), request_id=message.get("id")
            )
            unavailable = isinstance(exc, access.CredentialsUnavailable)
            return (503 if unavailable else 401), error.model_dump()
        if self._owned_slot(session_id, credentials.holder) is not None:
            return None
        return 404, _unknown_session(session_id, message.get("id")).model_dump()

    # ------------------------------------------------------------ WebSockets

    async def _websocket(self, scope, receive, send, call: _Call) -> None:
        """A ``/ws`` or ``/mcp`` WebSocket: attaching to a session only if it is the
        caller's; frames naming another's session answered as unknown; closed when idle
        or when its credentials are refused while it is open."""
        path = scope.get("path", "").rstrip("/")
        if path in ("/ws", "/mcp"):
            try:
                credentials = await _credentials_of(call)
            except access.CredentialsRefused:
                credentials = None  # openenv tells the client, at admission
            attach = access.current_request().query.get("session_id")
            if attach:
                slot = self._owned_slot(attach, credentials.holder) if credentials else None
                if slot is None:
                    # As for a session that does not exist: nothing to attach to.
                    await receive()  # websocket.connect
                    return await send({"type": "websocket.close", "code": 1008})
                call.slot = slot
        with access.hearing_credentials(lambda heard: _heard(call, heard)):
            await self.api(
                scope,
                self._websocket_receive(receive, send, call),
                self._websocket_send(send, call),
            )

    def _websocket_receive(self, receive, send, call: _Call):
        """Frames with tool arguments as JSON text read as objects, frames naming another's
        session answered as unknown; an idle client is disconnected after the slots' idle
        time, a session whose credentials were refused at once."""
        idle = self.slots.idle_seconds

        async def close(code: int, reason: str) -> dict:
            reason = reason.encode()[:123].decode(errors="ignore")  # a close frame's limit
            await send({"type": "websocket.close", "code": code, "reason": reason})
            return {"type": "websocket.disconnect", "code": code}

        async def next_message():
            slot = call.slot
            if slot is None:
                return await asyncio.wait_for(receive(), timeout=idle)
            if slot.ended is not None:
                return None
            receiving = asyncio.ensure_future(receive())
            ending = asyncio.ensure_future(slot.wait_ended())
            try:
                done, _ = await asyncio.wait(
                    {receiving, ending}, timeout=idle, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                ending.cancel()
            if receiving in done:
                return receiving.result()
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiving
            if slot.ended is not None:
                return None
            raise TimeoutError

        async def wrapped():
            while True:
                try:
                    message = await next_message()
                except TimeoutError:
                    return await close(1001, f"Idle for {idle} s: session closed.")
                if message is None:
                    assert call.slot is not None  # only a slot's end says None
                    return await close(1008, f"Session ended: {call.slot.ended}")
                if message.get("type") != "websocket.receive" or not message.get("text"):
                    return message
                answer = self._frame_refusal(message["text"], call)
                if answer is None:
                    return {**message, "text": _normalized(message["text"])}
                await send({"type": "websocket.send", "text": answer})

        return wrapped

    def _frame_refusal(self, text: str, call: _Call) -> str | None:
        """The answer to a frame whose JSON-RPC names a session not this connection's
        owner's (openenv's answer to an unknown session), or ``None`` to let it through."""
        frame = _json_object(text)
        data = frame.get("data") if frame is not None and frame.get("type") == "mcp" else None
        if not isinstance(data, dict):
            return None
        params = data.get("params")
        if not isinstance(params, dict) or "session_id" not in params:
            return None
        holder = call.credentials.holder if call.credentials is not None else None
        session_id = params["session_id"]
        if holder is not None and self._owned_slot(session_id, holder) is not None:
            return None
        error = _unknown_session(session_id, data.get("id")).model_dump()
        return json.dumps({"type": "mcp", "data": error})

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


def _heard(call: _Call, credentials: access.Credentials) -> None:
    """A reset on ``call``'s session chose ``credentials``: check them too while it is open."""
    slot = call.slot
    if slot is None or credentials.check is None or credentials.holder == slot.owner:
        return
    first = slot.check
    check = credentials.check

    def both() -> None:
        if first is not None:
            first()
        check()

    slot.check = both


def _unknown_session(session_id: Any, request_id: Any) -> JsonRpcResponse:
    """openenv's answer to a JSON-RPC call naming a session it does not have."""
    return JsonRpcResponse.error_response(
        JsonRpcErrorCode.INVALID_PARAMS,
        f"Unknown session_id: {session_id}",
        request_id=request_id,
    )


def _json_object(data: bytes | str) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


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


async def _read_body(receive) -> bytes:
    """The whole body of an HTTP request, with tool arguments given as JSON text read as
    objects (:func:`_normalized`)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    with contextlib.suppress(UnicodeDecodeError):
        body = _normalized(body.decode()).encode()
    return body


def _replay(body: bytes, receive):
    """An ASGI ``receive`` that gives ``body`` once, then what ``receive`` gives (the
    client's disconnect)."""
    sent = False

    async def wrapped():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return wrapped


async def _json_response(send, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 503:
        headers.append((b"retry-after", str(access.RETRY_AFTER).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
    # ``app`` for ``uvicorn tau2_env.faces.server:app``; built once, on first use.
    global _app
    if name == "app":
        if _app is None:
            # Behind the same front door as in the web project (Host, Origin, content
            # type, bounded bodies), configured from the environment.
            _app = guard.AgentFaceGuard(
                create_openenv_app(),
                face=guard.OPENENV_FACE,
                settings=guard.GuardSettings.from_config,
            )
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

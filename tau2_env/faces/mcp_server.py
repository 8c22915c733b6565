"""A standard MCP server for agents: one MCP session plays one τ²-bench episode.

Built on the official MCP SDK (``mcp.server.lowlevel.Server`` behind a
``StreamableHTTPSessionManager``: the streamable HTTP transport), so any MCP client —
the SDK's, a desktop assistant, an evaluation harness — can be the agent:

* **initialize** opens a session. The task comes from the URL's query (``domain``,
  ``split``, ``task_id``, ``seed``: ``/agent/mcp?domain=airline&task_id=27``) or from
  the arguments of the ``start`` tool; credentials from the ``Authorization: Bearer``
  header, through :func:`tau2_env.gate.access.resolve_credentials` (today: a Hugging Face
  token; without one, the server's own settings).
* **tools/list**: ``start``, the domain's tools (τ²'s names, descriptions and JSON
  schemas, as OpenEnv's ``list_tools``), ``respond_to_user(message)`` and ``done()``.
* **tools/call** returns MCP ``content`` (text) and ``structuredContent``: ``start``
  the customer's opening and the policy; the others ``output`` (the customer's reply,
  the tool's result) and ``done``, and once the episode is over τ²-bench's ``reward``,
  ``reward_info`` breakdown, ``termination_reason`` and ``messages``. A tool's failure
  (bad arguments, unknown tool, a call before ``start``) is an ``isError`` result and
  the episode goes on; protocol problems (an unknown domain in the URL) are JSON-RPC
  errors.

A session answers only the credential that opened it (another, or none, gets 404 as
for an unknown session); every request's credentials are resolved again (a revoked key
gets 401), and a session whose credentials are refused while it is open is closed
within seconds (:meth:`SessionSlots.watch`), its episode ended with the reason.
Sessions hold a slot of the shared :class:`~tau2_env.gate.capacity.SessionSlots`, granted
once the credentials are resolved: a refusal is HTTP 503 with ``Retry-After`` and a
JSON-RPC error whose ``data`` says ``CAPACITY_REACHED`` and ``retry_after``; a session
idle for the slots' idle time is closed (its episode ends unscored) and its id then
answers 404. A WebSocket (this transport is HTTP only) is refused. The SDK says when it
opens and discards a session only through private methods:
:func:`tau2_env.llm.compat.mcp_session_manager_class` holds them.

A session that ends normally (the client's DELETE, the idle reaper, a refused
credential) closes the streams its open GET is reading; the SDK then logs that stream's
``anyio.ClosedResourceError`` as an ERROR with a traceback. :class:`NormalCloseFilter`
keeps that one record out of the SDK's logger: every other error stays.

:class:`McpApp` is an ASGI app; its :meth:`McpApp.run` context must be entered for the
server's lifetime (the project's ASGI lifespan does it).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.shared.exceptions import McpError

from tau2_env import config
from tau2_env.engine import catalog
from tau2_env.faces.agent_session import AgentSession, BadRequest, Outcome, tool_specs
from tau2_env.faces.openenv_env import episode_executor
from tau2_env.gate import access
from tau2_env.gate.capacity import CapacityReached, SessionSlots, Slot
from tau2_env.llm import compat

__all__ = ["START", "McpApp", "NormalCloseFilter"]

START = "start"
NOT_STARTED = (
    "No conversation yet: call start first (it returns the customer's opening message "
    "and the policy to follow)."
)
INSTRUCTIONS = (
    "You are the customer-service agent of a τ²-bench task. Call `start` first: it "
    "returns the customer's opening message and the policy you must follow. Then use the "
    "domain's tools, talk to the customer with `respond_to_user(message)` (it returns "
    "their reply) and call `done()` when the conversation is over; the episode is then "
    "scored by τ²-bench's evaluator. One MCP session plays one episode."
)
_QUERY_KEYS = (
    "domain",
    "split",
    "task_id",
    "seed",
    "user_model",
    "evaluation",
    "retrieval_config",
)

_T = TypeVar("_T")


def _start_tool() -> types.Tool:
    return types.Tool(
        name=START,
        description=(
            "Start this session's episode and get the customer's opening message and the "
            "policy to follow. Arguments default to the URL's query (domain, split, "
            "task_id, seed); without a task_id a task of the split is drawn (seed makes "
            "it reproducible)."
        ),
        inputSchema={
            "type": "object",
            "properties": {
                "domain": {"type": "string", "description": "τ²-bench domain, e.g. airline"},
                "split": {"type": "string", "description": "train, test or base"},
                "task_id": {"type": "string", "description": "τ²-bench task id"},
                "seed": {"type": "integer", "description": "Seed of the task draw"},
                "user_model": {
                    "type": "string",
                    "description": "The customer model (with a studio API key): a model "
                    "id of the studio's picker, org/model or @connection/model",
                },
                "retrieval_config": {
                    "type": "string",
                    "description": "banking_knowledge only: how the agent reaches the "
                    "bank's documents, as tau2 run --retrieval-config (bm25: KB_search; "
                    "grep_only: grep; default bm25). The tools list changes with it",
                },
                "evaluation": {
                    "type": ["string", "integer"],
                    "description": "Play the next episode of this evaluation of an "
                    "outside agent (with a studio API key): its task, seed and customer "
                    "are the evaluation's. When none is left the result is an error whose "
                    "data says status 410; 429 with retry_after: ask again later",
                },
            },
        },
    )


@functools.cache
def _tools(domain: str, retrieval_config: str = "") -> tuple[types.Tool, ...]:
    listed = [
        types.Tool(name=s["name"], description=s["description"], inputSchema=s["input_schema"])
        for s in tool_specs(domain, retrieval_config)
    ]
    return (_start_tool(), *listed)


@dataclass(eq=False)
class _Session:
    """One MCP session: its client's credentials, its slot, its URL's task, its episode."""

    credentials: access.Credentials
    slot: Slot
    query: dict[str, Any]
    agent: AgentSession = field(default_factory=lambda: AgentSession(face="mcp"))
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    busy: int = 0  # POSTs being served: a session answering a call is not idle
    end_reason: str = "The MCP session was closed."

    def domain(self) -> str:
        if self.agent.episode is not None:
            return self.agent.episode.domain
        return self.query.get("domain") or config.default_domain()

    def retrieval_config(self) -> str:
        """The knowledge configuration its tools are listed for: the episode's, else the
        URL's ("": the domain's default)."""
        if self.agent.episode is not None:
            return self.agent.episode.retrieval_config or ""
        return self.query.get("retrieval_config") or ""


@dataclass
class _Opening:
    """A request that may open a session: the session it would be, once admitted."""

    session: _Session
    bound: bool = False


_opening: ContextVar[_Opening | None] = ContextVar("tau2_mcp_opening", default=None)


# The SDK's logger and the records it writes when a session's own close ends a stream
# (mcp 1.x, mcp/server/streamable_http.py: the GET stream's and a POST stream's writer).
SDK_LOGGER = "mcp.server.streamable_http"
_STREAM_WRITER_ERRORS = ("Error in standalone SSE writer", "Error in SSE writer")


class NormalCloseFilter(logging.Filter):
    """Drops the SDK's record of a stream writer that met its stream closed
    (``anyio.ClosedResourceError``): the session it served was closed, as sessions are.
    A writer's other errors, and every other record, pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (
            isinstance(error, anyio.ClosedResourceError) and record.msg in _STREAM_WRITER_ERRORS
        )


def _quiet_normal_closes() -> None:
    sdk = logging.getLogger(SDK_LOGGER)
    if not any(isinstance(f, NormalCloseFilter) for f in sdk.filters):
        sdk.addFilter(NormalCloseFilter())


class McpApp:
    """The MCP face's ASGI app (see the module docstring)."""

    def __init__(self, slots: SessionSlots, *, transport_security: Any = None) -> None:
        """``transport_security``: the SDK's ``TransportSecuritySettings`` (its
        DNS-rebinding protection: the Host and Origin it accepts), or ``None``."""
        compat.install()
        _quiet_normal_closes()
        self.slots = slots
        self.transport_security = transport_security
        self.sessions: dict[str, _Session] = {}
        self.server: Server = Server(
            "tau2", version=catalog.tau2_version(), instructions=INSTRUCTIONS
        )
        self.server.request_handlers[types.ListToolsRequest] = self._list_tools
        self.server.request_handlers[types.CallToolRequest] = self._call_tool
        # One session manager per serving event loop (an SDK manager runs once, on one
        # loop; tests serve one application from two servers).
        self._managers: dict[asyncio.AbstractEventLoop, Any] = {}

    @property
    def manager(self) -> Any:
        """This loop's session manager (:func:`tau2_env.llm.compat.mcp_session_manager_class`)."""
        try:
            return self._managers[asyncio.get_running_loop()]
        except KeyError:
            raise RuntimeError("The MCP server is not running: enter McpApp.run()") from None

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """A session manager's lifetime (enter it in the ASGI lifespan), with the reaper
        of idle sessions."""
        loop = asyncio.get_running_loop()
        manager = compat.mcp_session_manager_class()(
            self.server,
            on_open=self._opened,
            on_discard=self.end,
            session_idle_timeout=float(self.slots.idle_seconds),
            max_sessions=None,  # the slots decide
            security_settings=self.transport_security,
        )
        self._managers[loop] = manager
        try:
            async with manager.run(), anyio.create_task_group() as tasks:
                tasks.start_soon(self._reap_idle, manager)
                try:
                    yield
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            self._managers.pop(loop, None)

    async def _reap_idle(self, manager: Any) -> None:
        """Close sessions whose client sent nothing for the idle time. The SDK's own
        idle timeout spares a session with an open GET stream, which every SDK client
        keeps: without this, an idle client would hold its slot for good."""
        idle = self.slots.idle_seconds
        while True:
            await anyio.sleep(max(0.5, min(idle / 4, 30.0)))
            now = self.slots.now()
            for session_id in manager.open_sessions():
                session = self.sessions.get(session_id)
                if session and not session.busy and now - session.slot.last_active > idle:
                    await manager.discard(session_id)

    def _opened(self, session_id: str) -> None:
        """The SDK admitted a session: the one the request being served opens, if any."""
        opening = _opening.get()
        if opening is not None and not opening.bound:
            session = opening.session
            self.sessions[session_id] = session
            opening.bound = True
            manager = self.manager

            async def close(reason: str) -> None:
                session.end_reason = f"The MCP session was closed: {reason}"
                await manager.discard(session_id)

            session.slot.on_end = close

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            # Streamable HTTP has no WebSocket: refused before it is accepted.
            await receive()  # websocket.connect
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":
            return await self.manager.handle_request(scope, receive, send)
        request = access.ClientRequest.from_scope(scope, face="mcp")
        try:
            credentials = await access.resolve_credentials_async(request)
        except access.CredentialsUnavailable as exc:
            return await _json_error(send, 503, str(exc), retry_after=access.RETRY_AFTER)
        except access.CredentialsRefused as exc:
            return await _json_error(send, 401, str(exc))
        session_id = request.headers.get(MCP_SESSION_ID_HEADER)
        if session_id is not None:
            session = self.sessions.get(session_id)
            if session is not None:
                if session.slot.owner != credentials.holder:
                    # Only the credential that opened a session may use it.
                    return await _json_error(send, 404, "Session not found")
                self.slots.touch(session.slot)
                if scope.get("method") == "POST":
                    session.busy += 1
                    try:
                        return await self.manager.handle_request(scope, receive, send)
                    finally:
                        session.busy -= 1
                        self.slots.touch(session.slot)
            return await self.manager.handle_request(scope, receive, send)
        try:
            slot = self.slots.acquire(
                credentials.client,
                limit=credentials.limit,
                owner=credentials.holder,
                check=credentials.check,
            )
        except CapacityReached as exc:
            return await _json_error(send, 503, str(exc), data=exc.details(), retry=exc)
        query = {
            key: values[-1]
            for key, values in parse_qs(scope.get("query_string", b"").decode()).items()
            if key in _QUERY_KEYS
        }
        if request.evaluation and "evaluation" not in query:  # X-Tau2-Evaluation
            query["evaluation"] = request.evaluation
        opening = _Opening(_Session(credentials=credentials, slot=slot, query=query))
        token = _opening.set(opening)
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            _opening.reset(token)
            if not opening.bound:
                self.slots.release(slot)

    async def end(self, session_id: str) -> None:
        """The session is gone: end its episode unscored (if open), free its slot
        (idempotent: the SDK may discard a session more than once)."""
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        self.slots.release(session.slot)
        await _in_pool(session.agent.close, session.end_reason)

    # -------------------------------------------------------------- handlers

    def _session(self) -> _Session:
        request = self.server.request_context.request
        session_id = request.headers.get(MCP_SESSION_ID_HEADER) if request is not None else None
        session = self.sessions.get(session_id or "")
        if session is None:
            raise McpError(
                types.ErrorData(code=types.INVALID_REQUEST, message="No such MCP session")
            )
        return session

    async def _list_tools(self, req: types.ListToolsRequest) -> types.ServerResult:
        session = self._session()
        domain = session.domain()
        if domain not in catalog.domain_names():
            raise McpError(
                types.ErrorData(
                    code=types.INVALID_PARAMS,
                    message=(
                        f"Unknown domain {domain!r}; known: {', '.join(catalog.domain_names())}"
                    ),
                )
            )
        try:
            tools = _tools(domain, session.retrieval_config())
        except ValueError as exc:  # a retrieval configuration it has not, or cannot run
            raise McpError(types.ErrorData(code=types.INVALID_PARAMS, message=str(exc))) from None
        return types.ServerResult(types.ListToolsResult(tools=list(tools)))

    async def _call_tool(self, req: types.CallToolRequest) -> types.ServerResult:
        session = self._session()
        name, arguments = req.params.name, req.params.arguments or {}
        async with session.lock:
            if name == START:
                result = await self._start(session, arguments)
            elif session.agent.episode is None:
                result = _result(f"Error: {NOT_STARTED}", is_error=True)
            elif session.agent.acts_at_once(name):  # in memory, cannot end the episode
                result = _outcome_result(session.agent, session.agent.act(name, arguments))
            else:
                outcome = await _in_pool(session.agent.act, name, arguments)
                result = _outcome_result(session.agent, outcome)
        return types.ServerResult(result)

    async def _start(self, session: _Session, arguments: dict[str, Any]) -> types.CallToolResult:
        if session.agent.episode is not None:
            return _result(
                "Error: this session's episode has already started; one MCP session plays "
                "one episode (open a new session for another).",
                is_error=True,
            )
        chosen = {**session.query, **{k: v for k, v in arguments.items() if v is not None}}
        unknown = set(chosen) - set(_QUERY_KEYS)
        if unknown:
            return _result(f"Error: unknown argument(s) {', '.join(sorted(unknown))}", True)
        seed = chosen.get("seed")
        if isinstance(seed, str):
            try:
                chosen["seed"] = int(seed)
            except ValueError:
                return _result(f"Error: seed must be an integer, got {seed!r}", is_error=True)
        before = (session.domain(), session.retrieval_config())
        try:
            opening = await _in_pool(session.agent.start, credentials=session.credentials, **chosen)
        except BadRequest as exc:
            hint = " Over MCP, send your token as `Authorization: Bearer <token>`."
            data = {"status": exc.status, **exc.data}
            if exc.retry_after is not None:
                data["retry_after"] = exc.retry_after
            return _result(
                f"Error: {exc}{hint if exc.status == 401 else ''}", is_error=True, data=data
            )
        if (session.domain(), session.retrieval_config()) != before:
            await self.server.request_context.session.send_tool_list_changed()
        text = json.dumps({k: opening[k] for k in ("user_message", "policy", "task_id")})
        episode = session.agent.episode
        if episode is not None and episode.done:  # the customer could not even begin
            verdict = session.agent.verdict()
            return _result(verdict.get("error") or text, is_error=True, data={**opening, **verdict})
        return _result(text, data={**opening, "done": False})


def _result(
    text: str, is_error: bool = False, *, data: dict[str, Any] | None = None
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structuredContent=data,
        isError=is_error,
    )


def _outcome_result(agent: AgentSession, outcome: Outcome) -> types.CallToolResult:
    data: dict[str, Any] = {"output": outcome.text, "done": outcome.done}
    if outcome.done:
        data.update(agent.verdict())
    return _result(outcome.text, outcome.is_error, data=data)


async def _in_pool(func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    """``func`` in the episodes' thread pool (LLM calls, tools and scoring block)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(episode_executor(), functools.partial(func, *args, **kwargs))


async def _json_error(
    send,
    status: int,
    message: str,
    *,
    data: Any = None,
    retry: CapacityReached | None = None,
    retry_after: int | None = None,
) -> None:
    """An HTTP ``status`` answer with a JSON-RPC error body (no request id to answer)."""
    error: dict[str, Any] = {"code": types.INVALID_REQUEST, "message": message}
    if data is not None:
        error["data"] = data
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry is not None:
        retry_after = retry.retry_after
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

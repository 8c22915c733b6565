"""The OpenEnv face of the engine: an ``MCPEnvironment`` over one :class:`Episode`.

Tools are the domain's own (names, descriptions and JSON schemas from τ²) plus
``respond_to_user(message)`` and ``done()``. Because the domain, and so the tool list,
can change at every ``reset``, this environment serves ``list_tools``/``call_tool``
itself instead of registering functions on a FastMCP server; with its FastMCP client
and server cleared, openenv's ``/mcp`` endpoint routes JSON-RPC ``tools/list`` and
``tools/call`` through :meth:`Tau2Environment.step_async` too.

Concurrency: every blocking piece of work (building an episode, LLM turns, tool calls,
scoring) runs in one process-wide, bounded thread pool sized by ``MAX_CONCURRENT_ENVS``
— never on the event loop, never in asyncio's small default pool. Threads belong to the
pool, not to sessions: an idle session holds none. The class asks openenv for one shared
single-thread executor (``REQUIRES_SINGLE_THREAD_EXECUTOR``) for what openenv runs there
itself (constructing and closing environments, both trivial here) instead of one thread
per session.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import EnvironmentMetadata, Observation, State
from pydantic import Field

from tau2_env import catalog, config, engine, environments, llm

__all__ = ["ENDED_MESSAGE", "Tau2Environment", "Tau2ToolObservation", "episode_executor"]

ENDED_MESSAGE = "The conversation has ended."
NOT_STARTED_MESSAGE = "No conversation yet: call reset() first."
RESPOND_TO_USER = "respond_to_user"
DONE = "done"

_T = TypeVar("_T")


class Tau2ToolObservation(CallToolObservation):
    """A ``CallToolObservation`` that also carries the tool's output as ``data``.

    openenv's ``MCPToolClient`` (production mode, its only mode in 0.10) sends
    ``call_tool`` as JSON-RPC ``tools/call`` to ``/mcp``, which answers with the whole
    observation; the client returns its ``data`` key. The WebSocket ``step`` path reads
    ``result`` as before. Only the observation is subclassed: the action stays openenv's
    own ``CallToolAction`` (a subclass broke ``list_tools`` in the seed).
    """

    data: Any = Field(default=None, description="The tool's output, as call_tool returns it")


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
_warmed = threading.Event()


def _warm_default_domain() -> None:
    """Validate the default domain's database in the background when the first session
    opens, so that no reset pays for it (other domains: their first reset does)."""
    with _executor_lock:
        if _warmed.is_set():
            return
        _warmed.set()
    environments.warm_in_background([config.default_domain()])


def episode_executor() -> ThreadPoolExecutor:
    """The process-wide pool that runs episodes' blocking work (``MAX_CONCURRENT_ENVS`` threads).

    Threads start on demand and are shared by all sessions.
    """
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=config.max_concurrent_envs(), thread_name_prefix="tau2-episode"
            )
        return _executor


async def _run(func: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(episode_executor(), functools.partial(func, *args, **kwargs))


def _agent_tools() -> list[dict[str, Any]]:
    """The two tools every domain adds for the agent."""
    return [
        {
            "name": RESPOND_TO_USER,
            "description": (
                "Say something to the customer and get their reply. The conversation may "
                "end when the customer is done."
            ),
            "input_schema": {
                "type": "object",
                "properties": {
                    "message": {"type": "string", "description": "What to say to the customer."}
                },
                "required": ["message"],
            },
        },
        {
            "name": DONE,
            "description": "End the conversation from the agent's side; it is then scored.",
            "input_schema": {"type": "object", "properties": {}},
        },
    ]


@functools.cache
def _tools_for(domain: str) -> tuple[Tool, ...]:
    specs = engine.tool_specs(domain) + _agent_tools()
    return tuple(Tool(**spec) for spec in specs)


class Tau2Environment(MCPEnvironment):
    """One OpenEnv session: at most one open conversation, replaced by each ``reset``."""

    SUPPORTS_CONCURRENT_SESSIONS = True
    REQUIRES_SINGLE_THREAD_EXECUTOR = True

    def __init__(self) -> None:
        super().__init__(_shared_mcp_server())
        # We serve the tools ourselves (see module docstring); without these, openenv's
        # /mcp endpoint sends tools/list and tools/call through step_async.
        self.mcp_client = None
        self.mcp_server = None
        self._episode: engine.Episode | None = None
        self._split: str | None = None
        self._steps = 0
        _warm_default_domain()

    # ------------------------------------------------------------- openenv API

    @asynccontextmanager
    async def mcp_session(self) -> AsyncIterator[None]:
        """No FastMCP session to hold open: tools are served in :meth:`step_async`."""
        yield None

    @property
    def state(self) -> State:
        """Episode id, step count, domain, task, whether it is over and its reward (no secrets)."""
        episode = self._episode
        if episode is None:
            return State(episode_id=None, step_count=0)
        return State(
            episode_id=episode.id,
            step_count=self._steps,
            domain=episode.domain,
            split=self._split,
            task_id=episode.task.id,
            done=episode.done,
            reward=episode.reward,
            termination_reason=(
                episode.termination_reason.value if episode.termination_reason else None
            ),
            error=episode.error,
        )

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="tau2",
            description=(
                "τ²-bench customer-service conversations: the agent uses the domain's tools, "
                "respond_to_user and done; τ²-bench's evaluator scores the conversation."
            ),
            version=catalog.tau2_version(),
        )

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | int | None = None,
        hf_token: str | None = None,
        domain: str | None = None,
        split: str | None = None,
        **kwargs: Any,
    ) -> Observation:
        """Blocking reset (in-process use); the servers call :meth:`reset_async`."""
        return self._reset(
            seed=seed, task_id=task_id, hf_token=hf_token, domain=domain, split=split
        )

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | int | None = None,
        hf_token: str | None = None,
        domain: str | None = None,
        split: str | None = None,
        **kwargs: Any,
    ) -> Observation:
        """End any open conversation and start one on a task; returns the customer's opening.

        ``observation.metadata``: ``user_message``, ``policy``, ``task_id``, ``domain``,
        ``split``. Raises ``ValueError`` (sent to the client as an error) for an unknown
        domain, split or task and when there are no credentials for the customer.
        """
        return await _run(
            self._reset, seed=seed, task_id=task_id, hf_token=hf_token, domain=domain, split=split
        )

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Blocking step (in-process use); the servers call :meth:`step_async`."""
        if isinstance(action, ListToolsAction):
            return self._list_tools()
        if isinstance(action, CallToolAction):
            return self._call_tool(action.tool_name, dict(action.arguments or {}))
        return self._step_impl(action)

    async def step_async(
        self, action: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        """``list_tools`` answers at once; tool calls run in the episode pool."""
        if isinstance(action, ListToolsAction):
            return self._list_tools()
        if isinstance(action, CallToolAction):
            return await _run(self._call_tool, action.tool_name, dict(action.arguments or {}))
        return self._step_impl(action)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(
            done=False,
            metadata={"error": f"Unsupported action {type(action).__name__}; use call_tool."},
        )

    def close(self) -> None:
        if self._episode is not None:
            self._episode.abandon("The session was closed.")
            self._episode = None
        super().close()

    # ------------------------------------------------------------- internals

    def _reset(
        self,
        *,
        seed: int | None,
        task_id: str | int | None,
        hf_token: str | None,
        domain: str | None,
        split: str | None,
    ) -> Observation:
        if self._episode is not None:
            # A new reset ends the open conversation cleanly, without a score.
            self._episode.abandon("Replaced by a new reset().")
            self._episode = None
        self._steps = 0
        domain = domain or config.default_domain()
        split = split or config.default_split()
        if domain not in catalog.domain_names():
            raise ValueError(
                f"Unknown domain {domain!r}; known: {', '.join(catalog.domain_names())}"
            )
        try:
            route = llm.resolve_route(hf_token=hf_token)
        except llm.MissingCredentialsError as exc:
            raise ValueError(str(exc)) from None
        try:
            if task_id is None:
                task_id = engine.pick_task_id(domain=domain, split=split, seed=seed)
            task = catalog.get_tau2_task(domain, str(task_id))
        except KeyError as exc:
            raise ValueError(exc.args[0] if exc.args else str(exc)) from None

        episode = engine.Episode(domain=domain, task=task, user_llm=route)
        self._episode = episode
        self._split = split
        opening = episode.start()
        metadata: dict[str, Any] = {
            "user_message": opening.content if opening is not None else None,
            "policy": episode.policy,
            "task_id": task.id,
            "domain": domain,
            "split": split,
            "episode_id": episode.id,
            "user_model": route.describe(),
        }
        if episode.done:
            return self._final(Observation, metadata=metadata)
        return Observation(done=False, reward=None, metadata=metadata)

    def _list_tools(self) -> ListToolsObservation:
        domain = self._episode.domain if self._episode is not None else config.default_domain()
        return ListToolsObservation(tools=list(_tools_for(domain)))

    def _call_tool(self, name: str, arguments: dict[str, Any]) -> Tau2ToolObservation:
        episode = self._episode
        if episode is None:
            return Tau2ToolObservation(
                tool_name=name,
                error=ToolError(
                    error_type=ToolErrorType.EXECUTION_ERROR, message=NOT_STARTED_MESSAGE
                ),
                data=f"Error: {NOT_STARTED_MESSAGE}",
            )
        if episode.done:
            return self._final(Tau2ToolObservation, tool_name=name, text=ENDED_MESSAGE)
        self._steps += 1
        if name == RESPOND_TO_USER:
            message = arguments.get("message")
            extra = set(arguments) - {"message"}
            if not isinstance(message, str) or not message.strip() or extra:
                return _tool_result(
                    name,
                    "Error: respond_to_user takes one argument, message: a non-empty string.",
                    is_error=True,
                )
            reply = episode.say(message)
            if episode.done:
                text = reply.content if reply is not None else (episode.error or ENDED_MESSAGE)
                return self._final(Tau2ToolObservation, tool_name=name, text=text)
            return _tool_result(name, reply.content or "")
        if name == DONE:
            episode.finish()
            text = ENDED_MESSAGE if episode.error is None else episode.error
            return self._final(Tau2ToolObservation, tool_name=name, text=text)
        result = episode.call_tool(name, arguments)
        if episode.done:  # τ²'s step or error limit
            return self._final(Tau2ToolObservation, tool_name=name, text=result.content or "")
        return _tool_result(name, result.content or "", is_error=result.error)

    def _final(self, cls: type[Observation], *, text: str | None = None, **fields: Any):
        """The observation of an ended episode: done, τ²'s reward and ``reward_info``
        (or no reward and the reason in ``metadata["error"]``), and ``metadata["messages"]``."""
        episode = self._episode
        assert episode is not None
        metadata = dict(fields.pop("metadata", {}))
        metadata["termination_reason"] = (
            episode.termination_reason.value if episode.termination_reason else None
        )
        if episode.reward_info is not None:
            metadata["reward_info"] = episode.reward_info.model_dump(mode="json")
        if episode.error is not None:
            metadata["error"] = episode.error
        # The whole conversation (τ²'s message dicts) so a client can keep or re-score it.
        metadata["messages"] = episode.messages_json()
        if text is not None:
            fields["result"] = _result_payload(text, is_error=episode.error is not None)
            fields["data"] = text
        return cls(done=True, reward=episode.reward, metadata=metadata, **fields)


def _result_payload(text: str, *, is_error: bool = False) -> dict[str, Any]:
    """A tool result shaped like MCP's ``CallToolResult`` (the client reads ``data``)."""
    return {
        "content": [{"type": "text", "text": text}],
        "structured_content": None,
        "data": text,
        "is_error": is_error,
    }


def _tool_result(name: str, text: str, *, is_error: bool = False) -> Tau2ToolObservation:
    return Tau2ToolObservation(
        tool_name=name,
        result=_result_payload(text, is_error=is_error),
        data=text,
        done=False,
        reward=None,
    )


@functools.cache
def _shared_mcp_server() -> Any:
    """An empty FastMCP server, built once: MCPEnvironment's constructor wants one."""
    from fastmcp import FastMCP

    return FastMCP("tau2")

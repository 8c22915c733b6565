"""The OpenEnv face of the engine: an ``MCPEnvironment`` over one :class:`Episode`.

Tools are the domain's own (names, descriptions and JSON schemas from τ²) plus
``respond_to_user(message)`` and ``done()``. Because the domain, and so the tool list,
can change at every ``reset``, this environment serves ``list_tools``/``call_tool``
itself instead of registering functions on a FastMCP server; with its FastMCP client
and server cleared, openenv's ``/mcp`` endpoint routes JSON-RPC ``tools/list`` and
``tools/call`` through :meth:`Tau2Environment.step_async` too.

Concurrency: every blocking piece of work (building an episode, LLM turns, tool calls,
scoring) runs in one process-wide, bounded thread pool sized by ``MAX_CONCURRENT_ENVS``
— never on the event loop, never in asyncio's small default pool. A domain tool call
that can neither block nor end the episode (:meth:`~tau2_env.faces.agent_session.AgentSession.
acts_at_once`: τ²'s in-memory database, nobody recording) is answered on the loop
itself: the hop to a thread and back cost more CPU than the call (0.49 → 0.40 ms).
Threads belong to the pool, not to sessions: an idle session holds none. The class asks
openenv for one shared single-thread executor (``REQUIRES_SINGLE_THREAD_EXECUTOR``) for
what openenv runs there itself (constructing and closing environments, both trivial
here) instead of one thread per session.
"""

from __future__ import annotations

import asyncio
import dataclasses
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

from tau2_env import config
from tau2_env.engine import catalog, environments, episodes
from tau2_env.faces import agent_session
from tau2_env.faces.agent_session import ENDED_MESSAGE, NOT_STARTED_MESSAGE
from tau2_env.gate import access

__all__ = [
    "ENDED_MESSAGE",
    "Tau2Environment",
    "Tau2State",
    "Tau2ToolObservation",
    "episode_executor",
]

_T = TypeVar("_T")


class Tau2ToolObservation(CallToolObservation):
    """A ``CallToolObservation`` that also carries the tool's output as ``data``.

    openenv's ``MCPToolClient`` (production mode, its only mode in 0.10) sends
    ``call_tool`` as JSON-RPC ``tools/call`` to ``/mcp``, which answers with the whole
    observation; the client returns its ``data`` key. The WebSocket ``step`` path reads
    ``result`` as before. Only the observation is subclassed: the action stays openenv's
    own ``CallToolAction`` (a subclass broke ``list_tools`` in the original OpenEnv
    Space).
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


@functools.cache
def _tools_for(domain: str, retrieval_config: str = "") -> tuple[Tool, ...]:
    return tuple(Tool(**spec) for spec in agent_session.tool_specs(domain, retrieval_config))


class Tau2State(State):
    """What ``state`` returns: the episode, its progress and, once it is over, its verdict."""

    domain: str | None = Field(default=None, description="τ²-bench domain of the episode")
    split: str | None = Field(default=None, description="Split the task was drawn from")
    task_id: str | None = Field(default=None, description="τ²-bench task id")
    done: bool = Field(default=False, description="Whether the conversation has ended")
    reward: float | None = Field(
        default=None, description="τ²-bench's reward once scored (None while open or unscored)"
    )
    termination_reason: str | None = Field(
        default=None, description="τ²'s termination reason (user_stop, agent_stop, max_steps, …)"
    )
    error: str | None = Field(default=None, description="Why the episode ended without a score")
    reward_info: dict[str, Any] | None = Field(
        default=None, description="τ²-bench's reward breakdown (RewardInfo) once scored"
    )


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
        self._session = agent_session.AgentSession(face="openenv")
        _warm_default_domain()

    @property
    def _episode(self) -> episodes.Episode | None:
        return self._session.episode

    # ------------------------------------------------------------- openenv API

    @asynccontextmanager
    async def mcp_session(self) -> AsyncIterator[None]:
        """No FastMCP session to hold open: tools are served in :meth:`step_async`."""
        yield None

    @property
    def state(self) -> Tau2State:
        """Episode id, step count, domain, task, whether it is over, its reward and
        breakdown (no secrets)."""
        episode = self._episode
        if episode is None:
            return Tau2State(episode_id=None, step_count=0)
        return Tau2State(
            episode_id=episode.id,
            step_count=self._session.steps,
            domain=episode.domain,
            split=self._session.split,
            task_id=episode.task.id,
            done=episode.done,
            reward=episode.reward,
            termination_reason=(
                episode.termination_reason.value if episode.termination_reason else None
            ),
            error=episode.error,
            reward_info=(
                episode.reward_info.model_dump(mode="json") if episode.reward_info else None
            ),
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

    # The Task API (``/tau2/splits``, ``/tau2/tasks``, …): the default domain's splits.

    def list_splits(self) -> list[str]:
        return sorted(catalog.get_domain(config.default_domain()).splits)

    def num_tasks(self, split: str) -> int:
        return len(_split_ids(split))

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return [_task_json(task_id) for task_id in _split_ids(split)]

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        ids = _split_ids(split)
        if not 0 <= index < len(ids):
            raise IndexError(index)
        return _task_json(ids[index])

    def get_task_range(self, split: str, start: int | None, stop: int | None):
        return [_task_json(task_id) for task_id in _split_ids(split)[start:stop]]

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | int | None = None,
        hf_token: str | None = None,
        domain: str | None = None,
        split: str | None = None,
        user_model: str | None = None,
        training_session: str | None = None,
        evaluation: str | int | None = None,
        retrieval_config: str | None = None,
        **kwargs: Any,
    ) -> Observation:
        """Blocking reset (in-process use); the servers call :meth:`reset_async`."""
        request = _reset_request(hf_token, training_session)
        return self._reset(
            credentials=_resolved(request),
            seed=seed,
            task_id=task_id,
            domain=domain,
            split=split,
            user_model=user_model,
            evaluation=evaluation if evaluation is not None else request.evaluation,
            retrieval_config=retrieval_config,
        )

    async def reset_async(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | int | None = None,
        hf_token: str | None = None,
        domain: str | None = None,
        split: str | None = None,
        user_model: str | None = None,
        training_session: str | None = None,
        evaluation: str | int | None = None,
        retrieval_config: str | None = None,
        **kwargs: Any,
    ) -> Observation:
        """End any open conversation and start one on a task; returns the customer's opening.

        ``user_model`` chooses the customer model (a picker id: ``org/model`` on the
        router, ``@connection/model``), for a client with a studio key; without a key the
        customer is the server's. ``training_session`` names the training session the
        episode belongs to (for a studio key; it wins over the request's
        ``X-Tau2-Training-Session`` header and ``training_session`` query parameter).
        ``evaluation`` plays the next episode of that evaluation of an outside agent (else
        the request's ``X-Tau2-Evaluation`` header or ``evaluation`` query parameter):
        its task, seed and customer are the evaluation's; ``metadata`` adds
        ``evaluation``, ``trial`` and ``run_id``. With nothing left to play it raises
        ``BadRequest`` with status 410 (429 with ``retry_after``: ask again later).
        ``retrieval_config`` picks a knowledge domain's retrieval configuration (``tau2
        run --retrieval-config``; banking_knowledge, τ² 1.x; None: the domain's default,
        bm25): the episode's agent tools (``list_tools``) are that configuration's, and
        ``metadata`` says it. Refused in words for a domain without retrieval, an unknown
        configuration or one this server cannot run.
        ``observation.metadata``: ``user_message``, ``policy``, ``task_id``, ``domain``,
        ``split``, ``episode_id``, ``user_model``, and ``training_warning`` (one line)
        when the training session's split guard warns. Raises
        :class:`~tau2_env.faces.agent_session.BadRequest` (a ``ValueError``: sent to the
        client as an error, 4xx over HTTP) for an unknown domain, split or task, a
        mistyped value, and when there are no credentials for the customer. The
        credentials come from :func:`tau2_env.gate.access.resolve_credentials` (the request's
        ``Authorization`` header, ``hf_token``), resolved in a worker thread.
        """
        credentials = await _credentials(hf_token, training_session)
        if evaluation is None:
            evaluation = access.current_request().evaluation
        return await _run(
            self._reset,
            credentials=credentials,
            seed=seed,
            task_id=task_id,
            domain=domain,
            split=split,
            user_model=user_model,
            evaluation=evaluation,
            retrieval_config=retrieval_config,
        )

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Blocking step (in-process use); the servers call :meth:`step_async`."""
        if isinstance(action, ListToolsAction):
            return self._list_tools()
        if isinstance(action, CallToolAction):
            return self._call_tool(action.tool_name, action.arguments)
        return self._step_impl(action)

    async def step_async(
        self, action: Any, timeout_s: float | None = None, **kwargs: Any
    ) -> Observation:
        """``list_tools`` and the tool calls that neither wait nor block answer at once;
        the others run in the episode pool."""
        if isinstance(action, ListToolsAction):
            return self._list_tools()
        if isinstance(action, CallToolAction):
            if self._session.acts_at_once(action.tool_name):
                return self._call_tool(action.tool_name, action.arguments)
            return await _run(self._call_tool, action.tool_name, action.arguments)
        return self._step_impl(action)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        return Observation(
            done=False,
            metadata={"error": f"Unsupported action {type(action).__name__}; use call_tool."},
        )

    # Why the session ended, said in its episode's record (the server may set it first).
    close_reason = "The session was closed."

    def close(self) -> None:
        self._session.close(self.close_reason)
        super().close()

    # ------------------------------------------------------------- internals

    def _reset(
        self,
        *,
        credentials: access.Credentials,
        seed: Any,
        task_id: Any,
        domain: Any,
        split: Any,
        user_model: Any = None,
        evaluation: Any = None,
        retrieval_config: Any = None,
    ) -> Observation:
        metadata = self._session.start(
            credentials=credentials,
            domain=domain,
            split=split,
            task_id=task_id,
            seed=seed,
            user_model=user_model,
            evaluation=evaluation,
            retrieval_config=retrieval_config,
        )
        if self._session.episode is not None and self._session.episode.done:
            return self._final(Observation, metadata=metadata)
        return Observation(done=False, reward=None, metadata=metadata)

    def _list_tools(self) -> ListToolsObservation:
        """The open episode's agent tools (its retrieval configuration's, in a knowledge
        domain), else the default domain's."""
        episode = self._episode
        if episode is None:
            return ListToolsObservation(tools=list(_tools_for(config.default_domain())))
        return ListToolsObservation(
            tools=list(_tools_for(episode.domain, episode.retrieval_config or ""))
        )

    def _call_tool(self, name: str, arguments: Any) -> Tau2ToolObservation:
        if self._episode is None:
            return Tau2ToolObservation(
                tool_name=name,
                error=ToolError(
                    error_type=ToolErrorType.EXECUTION_ERROR, message=NOT_STARTED_MESSAGE
                ),
                data=f"Error: {NOT_STARTED_MESSAGE}",
            )
        outcome = self._session.act(name, arguments)
        if outcome.done:
            return self._final(Tau2ToolObservation, tool_name=name, text=outcome.text)
        return _tool_result(name, outcome.text, is_error=outcome.is_error)

    def _final(self, cls: type[Observation], *, text: str | None = None, **fields: Any):
        """The observation of an ended episode: done, τ²'s reward and ``reward_info``
        (or no reward and the reason in ``metadata["error"]``), and ``metadata["messages"]``."""
        metadata = dict(fields.pop("metadata", {}))
        verdict = self._session.verdict()
        reward = verdict.pop("reward")
        metadata.update(verdict)
        if text is not None:
            fields["result"] = _result_payload(text, is_error="error" in verdict)
            fields["data"] = text
        return cls(done=True, reward=reward, metadata=metadata, **fields)


def _split_ids(split: str) -> list[str]:
    """The task ids of ``split`` in the default domain; ``BadRequest`` if unknown."""
    domain = config.default_domain()
    splits = catalog.get_domain(domain).splits
    if split not in splits:
        raise agent_session.BadRequest(
            f"Unknown split {split!r} for domain {domain!r}; known: {', '.join(sorted(splits))}"
        )
    return list(splits[split])


def _task_json(task_id: str) -> dict[str, Any]:
    return catalog.get_tau2_task(config.default_domain(), task_id).model_dump(mode="json")


def _reset_request(hf_token: Any, training_session: Any = None) -> access.ClientRequest:
    """The current request with the reset's ``hf_token`` and ``training_session`` (when
    given, it wins over the request's); ``BadRequest`` if either is not text."""
    for name, value in (("hf_token", hf_token), ("training_session", training_session)):
        if value is not None and not isinstance(value, str):
            raise agent_session.BadRequest(f"{name} must be a string, got {type(value).__name__}")
    request = access.current_request()
    training = access.training_session_name(training_session) or request.training_session
    return dataclasses.replace(request, hf_token=hf_token or None, training_session=training)


def _resolved(request: access.ClientRequest) -> access.Credentials:
    """:func:`tau2_env.gate.access.resolve_credentials`, a refusal as ``BadRequest`` (401),
    told to the face serving the session (:func:`tau2_env.gate.access.credentials_used`)."""
    try:
        credentials = access.resolve_credentials(request)
    except access.CredentialsUnavailable as exc:
        raise agent_session.BadRequest(str(exc), status=503) from None
    except access.CredentialsRefused as exc:
        raise agent_session.BadRequest(str(exc), status=401) from None
    access.credentials_used(credentials)
    return credentials


async def _credentials(hf_token: Any, training_session: Any = None) -> access.Credentials:
    """The reset's credentials (:func:`_resolved`), resolved in a worker thread (they
    may read a database or ask the Hub)."""
    request = _reset_request(hf_token, training_session)
    # The thread gets a copy of this context; what it is told is heard here.
    return await access.in_credentials_pool(_resolved, request)


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

"""One conversation over one τ²-bench task: the one driver every face goes through.

An :class:`Episode` is τ²'s own ``Orchestrator`` over the domain's ``Environment``, the
task, τ²'s ``UserSimulator`` and an agent, advanced hop by hop exactly as
``Orchestrator.run()`` advances it: the same hops, the same step and error limits
(checked after every hop that is not a tool call), the same trajectory (``turn_idx``
numbered as ``get_trajectory()`` numbers it), scored by τ²'s ``evaluate_simulation``.

Two kinds of agent drive it:

* τ²'s own ``LLMAgent`` (the agent of ``tau2 run`` and the leaderboard), given an
  ``agent_llm`` route: :meth:`Episode.run` plays the whole conversation, reporting each
  hop's new messages to a callback and asking another whether to stop (model runs).
  In the paper's ablations (``mode``) τ²'s other agents play instead, built as
  ``tau2 run --agent`` builds them: ``no_user`` is ``--agent llm_agent_solo --user
  dummy_user`` (τ²'s ``LLMSoloAgent`` holds the agent's and the customer's tools, gets
  the task's ticket and works alone in τ²'s solo mode; scored in solo mode), and
  ``oracle_plan`` is ``--agent llm_agent_gt`` (τ²'s ``LLMGTAgent``, given the task's
  expected actions, against the simulated customer).
* An agent outside τ² (a person on the play page, an OpenEnv or MCP client): each of
  its actions — :meth:`Episode.say`, :meth:`Episode.call_tool`, :meth:`Episode.finish`
  — is handed to the orchestrator as the agent's next message, and the customer's side
  (with their phone tools in telecom) runs until it is the agent's turn again.

Nothing is kept between calls that the messages do not hold: ``Episode(messages=...)``
rebuilds any conversation from its stored messages (τ²'s orchestrator replays the tool
calls and checks their results), so any process can continue it. An episode holds no
thread; its methods are synchronous and make blocking LLM calls, so async callers run
them in an executor (see ``tau2_env.faces.openenv_env``). Not thread-safe: one caller at a time.
"""

from __future__ import annotations

import functools
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# isort: off
# τ² only through tau2_env.llm._tau2 first (quiet import, local litellm price list).
from tau2_env.llm._tau2 import registry  # noqa: F401
from tau2.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS
from tau2.data_model.message import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from tau2.data_model.simulation import RewardInfo, SimulationRun
from tau2.data_model.tasks import InitialState, RewardType, Task
from tau2.evaluator.evaluator import EvaluationType
from tau2.orchestrator.orchestrator import Role
from tau2.utils.utils import get_now

# isort: on
from tau2_env import config
from tau2_env.engine import catalog, environments, scoring
from tau2_env.llm import compat, embeddings, gateway, tau2_gen
from tau2_env.llm.llm_args import DEFAULT_AGENT_ARGS, DEFAULT_USER_ARGS
from tau2_env.llm.tau2_gen import TerminationReason

__all__ = [
    "AGENT_STOP",
    "DEFAULT_MAX_ERRORS",
    "DEFAULT_MAX_STEPS",
    "FIRST_AGENT_MESSAGE",
    "IMPLEMENTATIONS",
    "MODES",
    "Episode",
    "EpisodeOver",
    "Hop",
    "TerminationReason",
    "count_errors",
    "count_hops",
    "customer_for",
    "failure_reason",
    "messages_from_json",
    "mode_domain_refusal",
    "mode_runs_task",
    "messages_to_json",
    "pick_task_id",
    "tool_specs",
]

# τ²'s orchestrator opens every conversation with this agent line (non-solo mode); an
# agent ends one by saying this (τ²'s stop token).
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
AGENT_STOP = "###STOP###"

# The paper's ablations, and what ``tau2 run --agent … --user …`` names each side in
# them (τ²'s registry names, as its results files' ``agent_info`` / ``user_info`` write
# them). The mode's values are Run.mode's and Evaluation.mode's.
DEFAULT, NO_USER, ORACLE_PLAN = "default", "no_user", "oracle_plan"
MODES = (DEFAULT, NO_USER, ORACLE_PLAN)
IMPLEMENTATIONS: dict[str, tuple[str, str]] = {
    DEFAULT: ("llm_agent", "user_simulator"),
    NO_USER: ("llm_agent_solo", "dummy_user"),
    ORACLE_PLAN: ("llm_agent_gt", "user_simulator"),
}


def mode_domain_refusal(*, domain: str, mode: str) -> str | None:
    """Why τ² cannot run ``mode`` on ``domain`` (``None``: it can). No-User needs τ²'s
    solo mode, which only some domains' environments have: τ²'s own constructor is
    asked (airline and retail raise, telecom and mock build one)."""
    if mode not in MODES:
        return f"Unknown mode {mode!r}."
    if mode != NO_USER:
        return None
    return _solo_refusal(domain)


@functools.cache
def _solo_refusal(domain: str) -> str | None:
    try:
        tau2_gen.build_solo_environment(domain=domain)
    except Exception as exc:  # τ² says why: "Airline domain does not support solo mode"
        return f"τ²-bench cannot run {domain} without a user: {exc}."
    return None


def mode_runs_task(*, mode: str, task: Task) -> bool:
    """Whether ``tau2 run`` in ``mode`` runs ``task`` (it leaves out the tasks its agent
    refuses: Oracle plan needs expected actions, No-User a ticket — τ²'s own
    ``check_valid_task``)."""
    agent = IMPLEMENTATIONS[mode][0]
    return agent == "llm_agent" or tau2_gen.AGENT_CLASSES[agent].check_valid_task(task)


_MESSAGE_TYPES = {
    "assistant": AssistantMessage,
    "user": UserMessage,
    "tool": ToolMessage,
    "system": SystemMessage,
}


class EpisodeOver(RuntimeError):
    """The agent acted on an episode that has already ended."""


def messages_from_json(items: Iterable[dict[str, Any] | Message]) -> list[Message]:
    """τ² message objects from their ``model_dump(mode="json")`` dicts (objects pass through)."""
    messages: list[Message] = []
    for item in items:
        if not isinstance(item, dict):
            messages.append(item)
            continue
        role = item.get("role")
        if role not in _MESSAGE_TYPES:
            raise ValueError(f"Unknown message role {role!r}")
        messages.append(_MESSAGE_TYPES[role].model_validate(item))
    return messages


def messages_to_json(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The messages as JSON-ready dicts (τ²'s own ``model_dump(mode="json")``)."""
    return [m.model_dump(mode="json") for m in messages]


def tool_specs(domain: str, retrieval_config: str = "") -> list[dict[str, Any]]:
    """The agent's tools of ``domain`` (played with ``retrieval_config``, a knowledge
    domain's; "": its default): ``name``, ``description`` and JSON ``input_schema``.

    Taken from τ²'s ``Tool.openai_schema`` (schemas may contain ``$defs``). Raises
    ``KeyError`` for an unknown domain, ``ValueError`` for a configuration it cannot run.
    """
    specs = []
    for tool in catalog.agent_tools(domain, retrieval_config):
        function = tool.schema.get("function", {})
        specs.append(
            {
                "name": tool.name,
                "description": function.get("description", "") or "",
                "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
            }
        )
    return specs


def pick_task_id(*, domain: str, split: str, seed: int | None = None) -> str:
    """A task id of ``split``: random, or reproducible with ``seed``.

    Raises ``KeyError`` for an unknown domain or split.
    """
    splits = catalog.get_domain(domain).splits
    if split not in splits:
        raise KeyError(
            f"Unknown split {split!r} for domain {domain!r}; known: {', '.join(sorted(splits))}"
        )
    ids = splits[split]
    if not ids:
        raise KeyError(f"Split {split!r} of domain {domain!r} has no tasks")
    return random.Random(seed).choice(list(ids))  # noqa: S311 - task choice, not security


def customer_for(
    *,
    environment: Any,
    task: Task,
    user_llm: gateway.Route,
    user_llm_args: dict[str, Any] | None = None,
) -> Any:
    """τ²'s simulated customer for ``task`` in ``environment`` (with its phone tools, if any).

    Its LLM calls carry the customer's role marker, so they go along ``user_llm``'s route
    inside :func:`tau2_env.llm.gateway.conversation`; no key is ever put in its arguments.
    ``user_llm_args`` are ``tau2 run --user-llm-args`` (``None``: τ²'s default).
    """
    return tau2_gen.build_user(
        environment=environment,
        task=task,
        llm=user_llm.model,
        llm_args=_user_args(user_llm_args),
    )


def _args(given: dict[str, Any] | None, default: dict[str, Any]) -> dict[str, Any]:
    return dict(default) if given is None else dict(given)


def _user_args(given: dict[str, Any] | None) -> dict[str, Any]:
    """The customer's LLM arguments, marked with their role for the gateway."""
    return {**_args(given, DEFAULT_USER_ARGS), gateway.ROLE_KEY: gateway.ROLE_USER}


def count_hops(messages: Iterable[Message]) -> int:
    """Orchestrator hops a history took: one per agent/customer message, one per tool batch."""
    hops = 0
    previous_was_tool = False
    for message in messages:
        if isinstance(message, ToolMessage):
            if not previous_was_tool:
                hops += 1
            previous_was_tool = True
        else:
            hops += 1
            previous_was_tool = False
    return hops


def count_errors(messages: Iterable[Message]) -> int:
    """Tool results that were errors (what τ²'s error limit counts)."""
    return sum(1 for m in messages if isinstance(m, ToolMessage) and m.error)


def failure_reason(exc: BaseException, route: gateway.Route | None = None) -> str:
    """A readable, secret-free reason for ``exc``."""
    if isinstance(exc, gateway.LLMCallError | gateway.MissingCredentialsError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return gateway.redact(text, route.api_key if route is not None else None)


class ExternalAgent(tau2_gen.AgentBase):
    """The agent side played from outside τ² (a person, an RL policy, an API client).

    The orchestrator asks it for the agent's next message; it answers with the one
    action it was handed (:attr:`pending`). Like τ²'s solo agent, it stops the
    conversation by saying τ²'s stop token.
    """

    def __init__(self) -> None:
        self.pending: AssistantMessage | None = None

    def generate_next_message(self, message: Any, state: None) -> tuple[AssistantMessage, None]:
        pending, self.pending = self.pending, None
        if pending is None:
            raise RuntimeError("The orchestrator asked the outside agent for a message it lacks")
        return pending, state

    def get_init_state(self, message_history: list[Message] | None = None) -> None:
        return None

    def stop(self, message: Any = None, state: Any = None) -> None:
        return None

    @classmethod
    def is_stop(cls, message: AssistantMessage) -> bool:
        return not message.is_tool_call() and AGENT_STOP in (message.content or "")

    def set_seed(self, seed: int) -> None:
        return None


@dataclass(frozen=True)
class Hop:
    """What one hop of a driven conversation added (see :meth:`Episode.run`)."""

    messages: list[dict[str, Any]]  # τ²'s messages as JSON, ``turn_idx`` numbered
    speaker: str  # "agent" or "customer": who was asked to speak
    # Wall time of the hop (LLM call, tool calls), from its first try: a hop tried again
    # after a transient failure counts its failed tries and the waits between them too.
    seconds: float
    # Every LLM call attempt the hop made, in order, the failed ones included (each call's
    # retries, and those of the tries of the hop that failed before).
    attempts: tuple[gateway.Attempt, ...] = ()


class Episode:
    """One conversation between an agent and τ²'s simulated customer over one task.

    Guarantees: ``messages`` is the whole conversation (τ² message objects, in order);
    once ``done``, either ``reward_info`` is τ²'s verdict, or ``error`` says why there is
    none, or scoring was left to the caller (``score_on_end=False``, see :meth:`score`);
    the customer's LLM calls use ``user_llm`` and nothing else, the judge's
    ``judge_llm`` (default: ``user_llm``), the agent's (with ``agent_llm``) ``agent_llm``.
    """

    def __init__(
        self,
        *,
        domain: str,
        user_llm: gateway.Route,
        task: Task | None = None,
        task_id: str | None = None,
        messages: Iterable[dict[str, Any] | Message] | None = None,
        termination_reason: TerminationReason | str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_errors: int = DEFAULT_MAX_ERRORS,
        nl_judge: str | None = None,
        agent_llm: gateway.Route | None = None,
        agent_llm_args: dict[str, Any] | None = None,
        user_llm_args: dict[str, Any] | None = None,
        judge_llm: gateway.Route | None = None,
        seed: int | None = None,
        score_on_end: bool = True,
        mode: str = DEFAULT,
        retrieval_config: str | None = None,
        timeout: float | None = None,
        elapsed: float = 0.0,
        embedding_llm: gateway.Route | None = None,
    ) -> None:
        compat.install()  # idempotent: τ²'s LLM calls go along this episode's routes
        if task is None:
            if task_id is None:
                raise ValueError("Episode needs a task or a task_id")
            task = catalog.get_tau2_task(domain, str(task_id))
        self.domain = domain
        self.task: Task = task
        self.id = uuid.uuid4().hex
        self.seed = seed
        self.nl_judge = nl_judge or config.nl_judge_mode()
        self.score_on_end = score_on_end
        self._user_llm = user_llm
        self._agent_llm = agent_llm
        self._judge_llm = judge_llm  # None: the customer's route judges
        # Where a knowledge domain's embeddings go (an embedding retrieval configuration),
        # and what they used over the episode's life (building its environments, the
        # agent's searches, scoring): tau2_env.llm.embeddings counts them as "embedder".
        self._embedding_llm = embedding_llm
        self._embedding_meter = gateway.UsageMeter()
        self.reward_info: RewardInfo | None = None
        self.evaluation_seconds: float | None = None
        # The NL judge's tokens in the last scoring (llm.metered, role judge).
        self.judge_usage = gateway.Usage()
        # What this episode may wait on providers' Retry-After over all its calls.
        self.waits = gateway.WaitBudget()
        self.error: str | None = None
        self.failure: BaseException | None = None  # the LLM call that ended a run()
        self._ended: TerminationReason | None = None  # an end the orchestrator did not make
        if mode not in MODES:
            raise ValueError(f"Unknown mode {mode!r}; known: {', '.join(MODES)}")
        if mode != DEFAULT and agent_llm is None:
            raise ValueError(f"Mode {mode!r} is played by τ²'s own agent: it needs an agent_llm")
        refusal = mode_domain_refusal(domain=domain, mode=mode)
        if refusal is not None:
            raise ValueError(refusal)
        self.mode = mode
        self.solo = mode == NO_USER  # τ²'s solo mode: no customer, the agent works alone
        # A knowledge domain's retrieval configuration (None: the domain has none).
        refusal = catalog.retrieval_refusal(
            domain=domain, retrieval_config=retrieval_config, embeddings=embedding_llm is not None
        )
        if refusal is not None:
            raise ValueError(refusal)
        self.retrieval_config = retrieval_config or catalog.default_retrieval_config(domain)
        # What `tau2 run --retrieval-config` gives the environment and the evaluator.
        self.env_kwargs = tau2_gen.environment_kwargs(
            domain=domain, task=task, retrieval_config=self.retrieval_config
        )
        # `tau2 run --timeout`: τ²'s orchestrator ends the conversation once its clock
        # has run this long (None: never); the clock starts now, as run() starts it
        # before initialize(), or ``elapsed`` seconds ago for a conversation resumed.
        refusal = catalog.timeout_refusal(timeout)
        if refusal is not None:
            raise ValueError(refusal)
        self.timeout = timeout
        self._clock_started = time.perf_counter() - max(elapsed, 0.0)
        self._limits = (max_steps, max_errors)
        self._llm_args = (agent_llm_args, user_llm_args)

        history = messages_from_json(messages or ())
        # An embedding configuration embeds the knowledge base here (once per connection
        # model: later builds read it from the cache), on the episode's embedder route.
        with self.llm_context():
            self._build(history)
        # τ²'s solo agent speaks first, inside the orchestrator's initialize(): a new
        # solo conversation is opened by run(), where that LLM call is a hop like any.
        self._opening = self.solo and not history
        if not self._opening:
            with self.llm_context():
                self._orchestrator.initialize()
        _keep_stored_stamps(self._orchestrator.trajectory, history)
        # τ² counts hops and errors from zero after a replay; a continued conversation
        # carries over those it had. Not hops: the task's own opening history, or else
        # the greeting that initialize() put first.
        if history:
            played = history[len(_task_history(task)) or 1 :]
            self._orchestrator.step_count = count_hops(played)
            self._orchestrator.num_errors = count_errors(played)
        if termination_reason:
            # How the stored conversation ended, as τ² recorded it, wins over what the
            # replay infers from its last message: τ² records max_steps even when that
            # last step was the customer's stop, and scores the ending it recorded.
            self._orchestrator.done = True
            self._orchestrator.termination_reason = tau2_gen.termination_reason(
                str(getattr(termination_reason, "value", termination_reason))
            )
        elif history and self._orchestrator.to_role != Role.ENV:
            # τ²'s limits after the last stored hop (it may have been played elsewhere:
            # a person's message is stored before the customer's turn runs).
            self._check_limits()

    def _build(self, history: list[Message]) -> None:
        """The environment, both sides and τ²'s orchestrator over them, as ``tau2 run``'s
        ``run_task`` builds them for this episode's mode (not initialised yet)."""
        task, domain = self.task, self.domain
        agent_llm, user_llm = self._agent_llm, self._user_llm
        agent_llm_args, user_llm_args = self._llm_args
        if self.solo:
            # τ²'s solo environment (telecom's has a policy of its own), by τ²'s constructor.
            self.environment = tau2_gen.build_solo_environment(domain=domain)
        elif self.env_kwargs:
            # Built as `tau2 run` builds it for this task (a knowledge domain's retrieval
            # configuration): τ²'s own constructor with the run's environment arguments.
            self.environment = tau2_gen.build_environment(domain=domain, env_kwargs=self.env_kwargs)
        else:
            # A fresh environment without re-validating the domain's database each time;
            # the orchestrator applies the task's initial state and replays the history.
            self.environment = environments.fresh_environment(domain)
        if self.solo:
            self.user: Any = tau2_gen.build_dummy_user(
                environment=self.environment,
                task=task,
                llm=user_llm.model,
                llm_args=_user_args(user_llm_args),
            )
        else:
            self.user = customer_for(
                environment=self.environment,
                task=task,
                user_llm=user_llm,
                user_llm_args=user_llm_args,
            )
        if agent_llm is None:
            self.agent: Any = ExternalAgent()
        else:
            self.agent = tau2_gen.build_agent(
                kind=IMPLEMENTATIONS[self.mode][0],
                environment=self.environment,
                task=task,
                llm=agent_llm.model,
                llm_args={
                    **_args(agent_llm_args, DEFAULT_AGENT_ARGS),
                    gateway.ROLE_KEY: gateway.ROLE_AGENT,
                },
            )
        max_steps, max_errors = self._limits
        self._orchestrator = tau2_gen.build_orchestrator(
            domain=domain,
            agent=self.agent,
            user=self.user,
            environment=self.environment,
            task=_with_history(task, history) if history else task,
            max_steps=max_steps,
            max_errors=max_errors,
            seed=self.seed,
            solo_mode=self.solo,
            timeout=self.timeout,
        )
        tau2_gen.start_clock(self._orchestrator, elapsed=time.perf_counter() - self._clock_started)

    def _open(self) -> None:
        """Open a new solo conversation: τ²'s ``initialize()``, in which the agent makes
        its first call. If that call fails, everything is built afresh (initialize()
        had applied the task's initial state), so trying again starts clean."""
        try:
            self._orchestrator.initialize()
        except BaseException:
            self._build([])
            raise
        self._opening = False
        for index, message in enumerate(self._orchestrator.trajectory):
            message.turn_idx = index

    # ----------------------------------------------------------------- state

    @property
    def user_llm(self) -> gateway.Route:
        """The customer's (and judge's) route; its key never shows in a repr."""
        return self._user_llm

    @property
    def messages(self) -> list[Message]:
        """The conversation so far (τ²'s orchestrator's own trajectory)."""
        return self._orchestrator.trajectory

    @property
    def max_steps(self) -> int:
        return self._orchestrator.max_steps

    @property
    def max_errors(self) -> int:
        return self._orchestrator.max_errors

    @property
    def step_count(self) -> int:
        return self._orchestrator.step_count

    @property
    def num_errors(self) -> int:
        return self._orchestrator.num_errors

    @property
    def termination_reason(self) -> TerminationReason | None:
        if self._ended is not None:
            return self._ended
        reason = self._orchestrator.termination_reason if self._orchestrator.done else None
        return TerminationReason(reason) if reason is not None else None

    @property
    def started(self) -> bool:
        """True once the customer has said something (or the conversation ended)."""
        return self.done or any(isinstance(m, UserMessage) for m in self.messages)

    @property
    def done(self) -> bool:
        return self.termination_reason is not None or self.error is not None

    @property
    def reward(self) -> float | None:
        """τ²'s reward once scored; ``None`` while open or when it ended without a score."""
        return self.reward_info.reward if self.reward_info is not None else None

    @property
    def policy(self) -> str:
        return self.environment.get_policy()

    def last_customer_message(self) -> UserMessage | None:
        """The customer's latest text message (not a phone tool call), if any."""
        for message in reversed(self.messages):
            if isinstance(message, UserMessage) and not message.is_tool_call():
                return message
        return None

    def messages_json(self, start: int = 0) -> list[dict[str, Any]]:
        """The conversation from ``start`` as JSON-ready dicts, ``turn_idx`` numbered as
        τ²'s ``get_trajectory()`` numbers it: ready to store and to rebuild from."""
        out = []
        for index, message in enumerate(self.messages[start:], start):
            data = message.model_dump(mode="json")
            data["turn_idx"] = index
            out.append(data)
        return out

    def __repr__(self) -> str:
        state = "failed" if self.error else ("ended" if self.done else "open")
        return (
            f"<Episode {self.domain}/{self.task.id} {state} messages={len(self.messages)} "
            f"user={self._user_llm.describe()}>"
        )

    @property
    def embedding_usage(self) -> gateway.Usage:
        """The tokens of this episode's embeddings so far (none without an embedder)."""
        return self._embedding_meter.of(gateway.ROLE_EMBEDDER)

    @contextmanager
    def llm_context(self) -> Iterator[None]:
        """Run τ²'s LLM calls of this thread on this episode's routes (and its
        embeddings on its embedder route, counted on its meter), their ``Retry-After``
        waits taken from this episode's budget (``waits``)."""
        with (
            gateway.conversation(
                user=self._user_llm,
                agent=self._agent_llm,
                judge=self._judge_llm,
                embedder=self._embedding_llm,
            ),
            gateway.metered(self._embedding_meter),
            gateway.waits_bounded(self.waits),
        ):
            yield

    # ------------------------------------------------- τ²'s own agent drives

    def run(
        self,
        *,
        on_hop: Callable[[Hop], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        backoff: Callable[[gateway.LLMCallError, int], float | None] | None = None,
    ) -> str:
        """Play the conversation to its end with τ²'s ``LLMAgent`` (needs ``agent_llm``;
        in an ablation ``mode``, τ²'s agent of that mode — a new No-User conversation's
        first hop is the agent's first call, made in τ²'s ``initialize()``).

        Before every hop ``should_stop()`` is asked; after it, ``on_hop`` gets the hop's
        new messages. A tool call and its results make one reported hop, so a stored
        history never ends on an unanswered call. When an LLM call fails transiently
        (``LLMCallError.transient``: rate limit, provider error, timeout), ``backoff(exc,
        attempt)`` says how many seconds to wait before the hop is tried again (attempt
        1, 2, …), or ``None`` to give up; the failed call left the conversation as it
        was. Returns ``"ended"`` (scored, unless scoring failed: then ``error`` says
        why), ``"stopped"`` (``should_stop`` said so, before a hop or when a call in flight
        was interrupted for it; not scored) or ``"failed"`` (an LLM
        call failed; ``error`` names whose and why, ``failure`` is the exception, and the
        hop's partial messages were reported). Other exceptions propagate.
        """
        if self._agent_llm is None:
            raise RuntimeError("Episode.run needs an agent_llm: τ²'s LLMAgent plays the agent")
        attempt = 0
        tries: list[gateway.Attempt] = []  # the LLM attempts of the hop under way

        def heard(notice: gateway.CallNotice) -> None:
            if notice.phase in ("answered", "failed"):
                tries.extend(notice.tries)

        with self.llm_context(), gateway.observe_calls(heard):
            while not self.done:
                if should_stop is not None and should_stop():
                    return "stopped"
                written = len(self.messages)
                speaker = (
                    "agent"
                    if self._opening or self._orchestrator.to_role == Role.AGENT
                    else "customer"
                )
                if attempt == 0:  # a hop tried again keeps its first try's start
                    started = time.perf_counter()
                    tries.clear()
                try:
                    if self._opening:
                        self._open()
                    else:
                        self._hop()
                    while self._orchestrator.to_role == Role.ENV and not self.done:
                        self._hop()
                except (gateway.LLMCallError, gateway.MissingCredentialsError) as exc:
                    # A call ended by a stop (tau2_env.llm.outbound.interruptible): the
                    # conversation is as it was before it, and the run stops.
                    interrupted = getattr(exc, "kind", "") == "interrupted"
                    if interrupted and should_stop is not None and should_stop():
                        self._report(on_hop, written, speaker, started, tries)
                        return "stopped"
                    wait = None
                    if (
                        backoff is not None
                        and isinstance(exc, gateway.LLMCallError)
                        and exc.transient
                    ):
                        attempt += 1
                        wait = backoff(exc, attempt)
                    if wait is not None and len(self.messages) == written:
                        time.sleep(wait)
                        continue
                    self.failure = exc
                    self._report(on_hop, written, speaker, started, tries)
                    self.error = (
                        f"The knowledge base's embeddings failed: {exc}"
                        if isinstance(exc, embeddings.EmbeddingsError)
                        else f"The {speaker}'s model call failed: {exc}"
                    )
                    self._ended = (
                        TerminationReason.AGENT_ERROR
                        if speaker == "agent"
                        else TerminationReason.USER_ERROR
                    )
                    return "failed"
                attempt = 0
                self._report(on_hop, written, speaker, started, tries)
        self._score_if_due()
        return "ended"

    def _report(
        self,
        on_hop: Callable[[Hop], None] | None,
        written: int,
        speaker: str,
        started: float,
        tries: list[gateway.Attempt],
    ) -> None:
        if on_hop is not None and len(self.messages) > written:
            on_hop(
                Hop(
                    messages=self.messages_json(written),
                    speaker=speaker,
                    seconds=time.perf_counter() - started,
                    attempts=tuple(tries),
                )
            )

    # ------------------------------------------------ an outside agent acts

    def start(self) -> UserMessage | None:
        """Open the conversation: τ²'s greeting is there; the customer says their first line.

        Returns the customer's message, or ``None`` if the customer's LLM failed (then
        ``error`` says why and the episode is over).
        """
        if self.started:
            raise RuntimeError("Episode already started")
        return self.customer_turn()

    def customer_turn(self) -> UserMessage | None:
        """Let the customer answer what the agent said last, running their phone tools
        until they speak; returns their message (``None`` if their LLM failed: then
        ``error`` says why and the episode is over)."""
        if self.done or self._orchestrator.to_role == Role.AGENT:
            return self.last_customer_message() if not self.error else None
        try:
            with self.llm_context():
                while not self.done and self._orchestrator.to_role != Role.AGENT:
                    self._hop()
        except Exception as exc:
            self.error = f"The customer could not answer: {failure_reason(exc, self._user_llm)}"
            self._ended = TerminationReason.USER_ERROR
            return None
        self._score_if_due()
        last = self.messages[-1] if self.messages else None
        return last if isinstance(last, UserMessage) else None

    def say(self, content: str) -> UserMessage | None:
        """Say ``content`` to the customer; returns their reply.

        The reply may be a stop (``###STOP###`` …), which ends and scores the episode.
        Returns ``None`` if the customer's LLM failed (``error`` says why) or the agent's
        message ended the conversation (a stop, or τ²'s limits).
        Raises :class:`EpisodeOver` once the episode has ended.
        """
        if not isinstance(content, str) or not content.strip():
            raise ValueError("The message to the customer must be non-empty text")
        self._act(AssistantMessage(role="assistant", content=content))
        if self.done:
            self._score_if_due()
            return None
        return self.customer_turn()

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolMessage:
        """Call the agent's domain tool ``name``; returns τ²'s ``ToolMessage``.

        Unknown tools and bad arguments give a ``ToolMessage`` with ``error=True`` (as in
        τ²); the episode goes on unless τ²'s error or step limit is reached.
        Raises :class:`EpisodeOver` once the episode has ended.
        """
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ValueError("Tool arguments must be a JSON object")
        call = ToolCall(
            id=f"call_{uuid.uuid4().hex[:24]}",
            name=name,
            arguments=arguments,
            requestor="assistant",
        )
        self._act(AssistantMessage(role="assistant", content=None, tool_calls=[call]))
        with self.llm_context():
            self._hop()  # the environment answers: a hop of its own, as in τ²
        result = self.messages[-1]
        assert isinstance(result, ToolMessage)
        self._score_if_due()
        return result

    def finish(self) -> RewardInfo | None:
        """End the conversation from the agent's side (τ²'s stop) and score it.

        Returns τ²'s ``RewardInfo`` (``None`` if scoring failed; ``error`` says why, or
        when ``score_on_end`` is off). If the episode had already ended, it is scored as
        it ended (if it was not yet) and that verdict returned.
        """
        if not self.done:
            self._act(AssistantMessage(role="assistant", content=AGENT_STOP))
        self._score_if_due()
        return self.reward_info

    def abandon(self, reason: str) -> None:
        """End an open episode without a score (e.g. a new reset replaced it)."""
        if not self.done:
            self.error = reason
            self._ended = TerminationReason.AGENT_ERROR

    # -------------------------------------------------------------- scoring

    def score(self) -> RewardInfo | None:
        """Score the ended conversation with τ²'s evaluator (once); ``None`` if that
        failed (``error`` says why). Raises ``RuntimeError`` while it is open."""
        if self.termination_reason is None:
            raise RuntimeError("The conversation has not ended")
        if self.reward_info is None:
            try:
                self.reward_info = self.evaluate()
                self.error = None
            except Exception as exc:
                self.error = (
                    f"The conversation could not be scored: {failure_reason(exc, self._user_llm)}"
                )
        return self.reward_info

    def evaluation_type(self) -> EvaluationType:
        """τ²'s evaluation for this task: ``ALL`` (as ``tau2 run``), with the NL judge
        when the reward basis needs it or ``nl_judge == "always"`` and the task has some."""
        criteria = self.task.evaluation_criteria
        if criteria is None:
            return EvaluationType.ALL
        if RewardType.NL_ASSERTION in set(criteria.reward_basis or ()):
            return EvaluationType.ALL_WITH_NL_ASSERTIONS
        if self.nl_judge == "always" and criteria.nl_assertions:
            return EvaluationType.ALL_WITH_NL_ASSERTIONS
        return EvaluationType.ALL

    def simulation_run(self) -> SimulationRun:
        """The conversation as τ²'s ``SimulationRun`` (what ``evaluate_simulation`` reads):
        the orchestrator's ``get_trajectory()``, its termination reason and seed."""
        if self.termination_reason is None:
            raise RuntimeError("The conversation has not ended")
        trajectory = self._orchestrator.get_trajectory()
        start = trajectory[0].timestamp if trajectory else get_now()
        return SimulationRun(
            id=self.id,
            task_id=self.task.id,
            start_time=start or get_now(),
            end_time=get_now(),
            duration=0.0,
            termination_reason=self.termination_reason,
            reward_info=None,
            messages=trajectory,
            seed=self.seed,
        )

    def evaluate(self) -> RewardInfo:
        """τ²'s ``evaluate_simulation`` of the conversation as it stands (judge on our route)."""
        started = time.perf_counter()
        # τ²'s evaluator builds two environments per score: copy-on-access ones instead
        # of re-validating the database, and the expected side's database computed once
        # per task (see tau2_env.engine.environments and tau2_env.engine.scoring). A few
        # at a time per process: CPU-bound work in many threads at once only costs more.
        with (
            gateway.metered() as meter,
            _scoring_slots(),
            self.llm_context(),
            environments.fresh_environments_for_tau2(self.domain),
            scoring.expected_side_cached(),
        ):
            info = tau2_gen.evaluate(
                simulation=self.simulation_run(),
                task=self.task,
                evaluation_type=self.evaluation_type(),
                solo_mode=self.solo,
                domain=self.domain,
                env_kwargs=self.env_kwargs,
            )
        self.evaluation_seconds = time.perf_counter() - started
        self.judge_usage = meter.of(gateway.ROLE_JUDGE)
        return info

    # -------------------------------------------------------------- internals

    def _act(self, message: AssistantMessage) -> None:
        """Hand the outside agent's ``message`` to the orchestrator as the agent's hop."""
        if self.done:
            raise EpisodeOver("The conversation has ended.")
        if not isinstance(self.agent, ExternalAgent):
            raise RuntimeError("τ²'s LLMAgent plays this episode's agent; use run()")
        if self._orchestrator.to_role != Role.AGENT:
            raise RuntimeError("The conversation has not started; call start() first")
        self.agent.pending = message
        with self.llm_context():
            self._hop()

    def _hop(self) -> None:
        """One ``Orchestrator.step()`` and τ²'s limits after it, as ``Orchestrator.run()``
        checks them (never while a tool call waits for its results)."""
        orchestrator = self._orchestrator
        before = len(orchestrator.trajectory)
        with embeddings.failures() as failed:
            orchestrator.step()
        for index in range(before, len(orchestrator.trajectory)):
            orchestrator.trajectory[index].turn_idx = index  # as get_trajectory() numbers
        if failed:
            # τ² answered the agent's search with a tool error; the run ends here instead,
            # saying why (the endpoint went away or refused), as a failed model call does.
            raise failed[0]
        if orchestrator.to_role != Role.ENV:
            self._check_limits()

    def _check_limits(self) -> None:
        """τ²'s ``_check_termination``: the step limit, the error limit, then its own
        wall-clock timeout check (``tau2 run --timeout``)."""
        orchestrator = self._orchestrator
        if orchestrator.step_count >= orchestrator.max_steps:
            orchestrator.done = True
            orchestrator.termination_reason = TerminationReason.MAX_STEPS
        if orchestrator.num_errors >= orchestrator.max_errors:
            orchestrator.done = True
            orchestrator.termination_reason = TerminationReason.TOO_MANY_ERRORS
        tau2_gen.check_timeout(orchestrator)

    def _score_if_due(self) -> None:
        if self.score_on_end and self.done and self.error is None and self.reward_info is None:
            self.score()


_slots: threading.BoundedSemaphore | None = None
_slots_lock = threading.Lock()


def _scoring_slots() -> threading.BoundedSemaphore:
    """The process's scoring slots (``TAU2_SCORING_CONCURRENCY``, read once)."""
    global _slots
    with _slots_lock:
        if _slots is None:
            _slots = threading.BoundedSemaphore(config.scoring_concurrency())
        return _slots


def _task_history(task: Task) -> list[Message]:
    initial = task.initial_state
    return list(initial.message_history or []) if initial is not None else []


def _with_history(task: Task, history: list[Message]) -> Task:
    """A shallow copy of ``task`` whose initial history is ``history``: τ²'s orchestrator
    replays it in ``initialize()`` and works out whose turn it is."""
    initial = task.initial_state or InitialState(
        initialization_data=None, initialization_actions=None, message_history=None
    )
    return task.model_copy(
        update={"initial_state": initial.model_copy(update={"message_history": history})}
    )


def _keep_stored_stamps(trajectory: list[Message], history: list[Message]) -> None:
    """Give the replayed messages back their stored ``timestamp`` and ``turn_idx``.

    τ²'s ``initialize()`` restamps a replayed history (one second apart, ending now) and
    clears ``turn_idx``; the stored values are the conversation's own and sort the same
    way (all earlier than anything said from now on). Kept only when every stored
    message has a timestamp, so the trajectory never mixes the two clocks.
    """
    if not history or any(m.timestamp is None for m in history):
        for index, message in enumerate(trajectory):
            message.turn_idx = index
        return
    for index, (replayed, stored) in enumerate(zip(trajectory, history, strict=False)):
        replayed.timestamp = stored.timestamp
        replayed.turn_idx = index

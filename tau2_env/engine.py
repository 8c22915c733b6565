"""One conversation over one τ²-bench task: the episode engine.

An :class:`Episode` holds τ²'s own pieces — the domain's ``Environment``, the task, the
``UserSimulator`` and its state — and the conversation as τ²'s own message objects. The
agent side acts with :meth:`Episode.say` (the customer answers through τ²'s
``UserSimulator``; in telecom the customer may first run tools on their phone, inside τ²),
:meth:`Episode.call_tool` (a domain tool; bad arguments give a tool error, as in τ²) and
:meth:`Episode.finish`; the episode is then scored by τ²'s ``evaluate_simulation``.

Nothing is kept between calls that the messages do not hold: ``Episode(messages=...)``
rebuilds any conversation from its stored messages (τ²'s ``Environment.set_state`` replays
the tool calls and checks their results), so any process can continue it. An episode
holds no thread; its methods are synchronous and make blocking LLM calls, so async callers
run them in an executor (see ``tau2_env.openenv_env``).

A driver of τ²'s own ``Orchestrator`` (the Celery runner) can reuse an episode's
``environment``, ``user``, ``task`` and ``messages`` and run its hops inside
:meth:`Episode.llm_context`; see :meth:`Episode.orchestrator_task`.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from copy import deepcopy
from typing import Any

# isort: off
# τ² only through tau2_env._tau2 first (quiet import, local litellm price list).
from tau2_env._tau2 import registry  # noqa: F401
from tau2.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS
from tau2.data_model.message import (
    AssistantMessage,
    Message,
    MultiToolMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from tau2.data_model.simulation import RewardInfo, SimulationRun, TerminationReason
from tau2.data_model.tasks import RewardType, Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.user.base import is_valid_user_history_message
from tau2.user.user_simulator import UserSimulator
from tau2.utils.utils import get_now

# isort: on
from tau2_env import catalog, config, environments, llm

__all__ = [
    "AGENT_STOP",
    "FIRST_AGENT_MESSAGE",
    "Episode",
    "EpisodeOver",
    "customer_for",
    "messages_from_json",
    "messages_to_json",
    "pick_task_id",
    "tool_specs",
]

# τ²'s orchestrator opens every conversation with this agent line (non-solo mode), and
# τ²'s LLMAgent ends one by saying this; we do the same so trajectories look alike.
FIRST_AGENT_MESSAGE = "Hi! How can I help you today?"
AGENT_STOP = "###STOP###"

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


def tool_specs(domain: str) -> list[dict[str, Any]]:
    """The agent's tools of ``domain``: ``name``, ``description`` and JSON ``input_schema``.

    Taken from τ²'s ``Tool.openai_schema`` (schemas may contain ``$defs``).
    """
    specs = []
    for tool in catalog.get_domain(domain).tools:
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


def customer_for(*, environment: Any, task: Task, user_llm: llm.Route) -> UserSimulator:
    """τ²'s simulated customer for ``task`` in ``environment`` (with its phone tools, if any).

    Its LLM calls carry the customer's role marker, so they go along ``user_llm``'s route
    inside :func:`tau2_env.llm.conversation`; no key is ever put in its arguments.
    """
    try:
        user_tools = environment.get_user_tools()
    except Exception:  # τ² raises when the domain gives the customer no tools
        user_tools = None
    return UserSimulator(
        tools=user_tools or None,
        instructions=str(task.user_scenario),
        llm=user_llm.model,
        llm_args={llm.ROLE_KEY: llm.ROLE_USER},
    )


class Episode:
    """One conversation between an agent and τ²'s simulated customer over one task.

    Guarantees: ``messages`` is the whole conversation (τ² message objects, in order);
    once ``done``, either ``reward_info`` is τ²'s verdict or ``error`` says why there is
    none; the customer's and the judge's LLM calls use ``user_llm`` and nothing else.
    Not thread-safe: one caller at a time.
    """

    def __init__(
        self,
        *,
        domain: str,
        user_llm: llm.Route,
        task: Task | None = None,
        task_id: str | None = None,
        messages: Iterable[dict[str, Any] | Message] | None = None,
        termination_reason: TerminationReason | str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_errors: int = DEFAULT_MAX_ERRORS,
        nl_judge: str | None = None,
    ) -> None:
        if task is None:
            if task_id is None:
                raise ValueError("Episode needs a task or a task_id")
            task = catalog.get_tau2_task(domain, str(task_id))
        self.domain = domain
        self.task: Task = task
        self.id = uuid.uuid4().hex
        self.max_steps = max_steps
        self.max_errors = max_errors
        self.nl_judge = nl_judge or config.nl_judge_mode()
        self._user_llm = user_llm
        self.reward_info: RewardInfo | None = None
        self.evaluation_seconds: float | None = None
        self.error: str | None = None
        self.termination_reason: TerminationReason | None = (
            TerminationReason(termination_reason) if termination_reason else None
        )

        # A fresh environment without re-validating the domain's database each time.
        self.environment = environments.fresh_environment(domain)
        self.user = customer_for(environment=self.environment, task=task, user_llm=user_llm)

        history = messages_from_json(messages or ())
        if not history and task.initial_state is not None and task.initial_state.message_history:
            history = deepcopy(task.initial_state.message_history)
        initial = task.initial_state
        # Replays the tool calls of the history and raises if any result differs.
        self.environment.set_state(
            initialization_data=initial.initialization_data if initial else None,
            initialization_actions=initial.initialization_actions if initial else None,
            message_history=history,
        )
        self.messages: list[Message] = history
        self.user_state = self.user.get_init_state(
            message_history=[m for m in history if is_valid_user_history_message(m)]
        )
        self.step_count = _count_hops(history)
        self.num_errors = sum(1 for m in history if isinstance(m, ToolMessage) and m.error)
        if self.termination_reason is None and history:
            self.termination_reason = _ended_by(history[-1])

    # ----------------------------------------------------------------- state

    @property
    def user_llm(self) -> llm.Route:
        """The customer's (and judge's) route; its key never shows in a repr."""
        return self._user_llm

    @property
    def started(self) -> bool:
        return bool(self.messages)

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

    def messages_json(self) -> list[dict[str, Any]]:
        """The conversation as JSON-ready dicts, ready to store and to rebuild from."""
        return messages_to_json(self.messages)

    def __repr__(self) -> str:
        state = "failed" if self.error else ("ended" if self.done else "open")
        return (
            f"<Episode {self.domain}/{self.task.id} {state} messages={len(self.messages)} "
            f"user={self._user_llm.describe()}>"
        )

    @contextmanager
    def llm_context(self) -> Iterator[None]:
        """Run τ²'s customer and judge calls of this thread on this episode's route."""
        with llm.conversation(user=self._user_llm):
            yield

    def orchestrator_task(self) -> Task:
        """A copy of the task whose ``initial_state.message_history`` is this conversation.

        τ²'s ``Orchestrator(task=...)`` replays it in ``initialize()`` and works out whose
        turn it is, which is how a Celery runner continues a stored conversation.
        """
        task = self.task.model_copy(deep=True)
        if task.initial_state is None:
            from tau2.data_model.tasks import InitialState

            task.initial_state = InitialState(
                initialization_data=None, initialization_actions=None, message_history=None
            )
        task.initial_state.message_history = deepcopy(self.messages)
        return task

    # --------------------------------------------------------------- actions

    def start(self) -> UserMessage | None:
        """Open the conversation: τ²'s greeting, then the customer's first message.

        Returns the customer's message, or ``None`` if the customer's LLM failed (then
        ``error`` says why and the episode is over).
        """
        if self.started:
            raise RuntimeError("Episode already started")
        greeting = AssistantMessage(role="assistant", content=FIRST_AGENT_MESSAGE, cost=0.0)
        self._append(greeting)
        return self._customer_turn(greeting)

    def say(self, content: str) -> UserMessage | None:
        """Say ``content`` to the customer; returns their reply.

        The reply may be a stop (``###STOP###`` …), which ends and scores the episode.
        Returns ``None`` if the customer's LLM failed (``error`` says why).
        Raises :class:`EpisodeOver` once the episode has ended.
        """
        self._require_open()
        if not isinstance(content, str) or not content.strip():
            raise ValueError("The message to the customer must be non-empty text")
        message = AssistantMessage(role="assistant", content=content)
        self._append(message)
        if AGENT_STOP in content:  # τ²'s LLMAgent.is_stop: the agent ends the conversation
            self._end(TerminationReason.AGENT_STOP)
            return None
        if self._check_limits():  # τ² checks its limits before every non-tool hop
            return None
        return self._customer_turn(message)

    def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> ToolMessage:
        """Call the agent's domain tool ``name``; returns τ²'s ``ToolMessage``.

        Unknown tools and bad arguments give a ``ToolMessage`` with ``error=True`` (as in
        τ²); the episode goes on unless τ²'s error or step limit is reached.
        Raises :class:`EpisodeOver` once the episode has ended.
        """
        self._require_open()
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
        self._append(AssistantMessage(role="assistant", content=None, tool_calls=[call]))
        result = self._execute([call])[0]
        self._check_limits()
        return result

    def finish(self) -> RewardInfo | None:
        """End the conversation from the agent's side (τ²'s stop) and score it.

        Returns τ²'s ``RewardInfo`` (``None`` if scoring failed; ``error`` says why).
        If the episode had already ended, returns its existing verdict unchanged.
        """
        if self.done:
            return self.reward_info
        self._append(AssistantMessage(role="assistant", content=AGENT_STOP))
        self._end(TerminationReason.AGENT_STOP)
        return self.reward_info

    def abandon(self, reason: str) -> None:
        """End an open episode without a score (e.g. a new reset replaced it)."""
        if not self.done:
            self.error = reason
            self.termination_reason = TerminationReason.AGENT_ERROR

    # -------------------------------------------------------------- internals

    def _require_open(self) -> None:
        if self.done:
            raise EpisodeOver("The conversation has ended.")
        if not self.started:
            raise RuntimeError("The conversation has not started; call start() first")

    def _append(self, message: Message) -> None:
        message.turn_idx = len(self.messages)
        self.messages.append(message)
        if not isinstance(message, ToolMessage):
            self.step_count += 1

    def _execute(self, calls: list[ToolCall]) -> list[ToolMessage]:
        results = []
        for call in calls:
            result = self.environment.get_response(call)
            if result.error:
                self.num_errors += 1
            self._append(result)
            results.append(result)
        self.step_count += 1  # one hop for the environment, as in τ²'s orchestrator
        return results

    def _customer_turn(self, message: Message) -> UserMessage | None:
        """Let the customer answer ``message``, running their phone tools until they speak."""
        incoming: Message = message
        while True:
            try:
                with self.llm_context():
                    reply, self.user_state = self.user.generate_next_message(
                        incoming, self.user_state
                    )
                reply.validate()
            except Exception as exc:
                self._fail(f"The customer could not answer: {_reason(exc, self._user_llm)}")
                return None
            self._append(reply)
            if UserSimulator.is_stop(reply):
                self._end(TerminationReason.USER_STOP)
                return reply
            if not reply.is_tool_call():
                self._check_limits()
                return reply
            results = self._execute(reply.tool_calls)
            incoming = (
                results[0]
                if len(results) == 1
                else MultiToolMessage(role="tool", tool_messages=results)
            )
            # τ²'s orchestrator checks its limits only when the next hop is not a tool
            # call; the customer answering its phone's result is such a hop.
            if self._check_limits():
                return None

    def _check_limits(self) -> bool:
        """End the episode at τ²'s step or error limit; True if it ended."""
        if self.done:
            return True
        if self.step_count >= self.max_steps:
            self._end(TerminationReason.MAX_STEPS)
        elif self.num_errors >= self.max_errors:
            self._end(TerminationReason.TOO_MANY_ERRORS)
        return self.done

    def _fail(self, reason: str) -> None:
        self.error = reason
        self.termination_reason = TerminationReason.USER_ERROR

    def _end(self, reason: TerminationReason) -> None:
        self.termination_reason = reason
        try:
            self.reward_info = self.evaluate()
        except Exception as exc:
            self.error = f"The conversation could not be scored: {_reason(exc, self._user_llm)}"

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
        """The conversation as τ²'s ``SimulationRun`` (what ``evaluate_simulation`` reads)."""
        if self.termination_reason is None:
            raise RuntimeError("The conversation has not ended")
        trajectory = deepcopy(self.messages)
        for index, message in enumerate(trajectory):
            message.turn_idx = index
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
            seed=None,
        )

    def evaluate(self) -> RewardInfo:
        """τ²'s ``evaluate_simulation`` of the conversation as it stands (judge on our route)."""
        started = time.perf_counter()
        # τ²'s evaluator builds two fresh environments per score; copy-on-access ones
        # instead of re-validating the database (see tau2_env.environments).
        with self.llm_context(), environments.fresh_environments_for_tau2(self.domain):
            info = evaluate_simulation(
                simulation=self.simulation_run(),
                task=self.task,
                evaluation_type=self.evaluation_type(),
                solo_mode=False,
                domain=self.domain,
            )
        self.evaluation_seconds = time.perf_counter() - started
        return info


def _ended_by(message: Message) -> TerminationReason | None:
    if isinstance(message, UserMessage) and UserSimulator.is_stop(message):
        return TerminationReason.USER_STOP
    if (
        isinstance(message, AssistantMessage)
        and not message.is_tool_call()
        and AGENT_STOP in (message.content or "")
    ):
        return TerminationReason.AGENT_STOP
    return None


def _count_hops(messages: list[Message]) -> int:
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


def _reason(exc: BaseException, route: llm.Route) -> str:
    """A readable, secret-free reason for ``exc``."""
    if isinstance(exc, llm.LLMCallError | llm.MissingCredentialsError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return llm.redact(text, route.api_key)

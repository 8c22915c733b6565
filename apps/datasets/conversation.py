"""A run's conversation as a training example: what τ²'s agent was sent, in OpenAI's chat format.

One row per run (:func:`sft_row`): the system message τ²'s ``LLMAgent`` sends (its
instructions and the domain's policy), then the messages the agent saw, in order — the
customer's words, the agent's replies and tool calls, the results of its tool calls —
converted by τ²'s own ``to_litellm_messages`` (the messages of ``tau2 run``'s requests).
What the agent never saw stays out: telecom's customer-side phone calls and their results
(τ²'s ``is_valid_agent_history_message``).

Every message has the same four keys (``role``, ``content``, ``tool_calls``,
``tool_call_id``; ``None`` where a role has none), so Arrow-backed readers (Parquet,
``datasets``) give back exactly what was written. A tool call is OpenAI's ``{"id",
"type": "function", "function": {"name", "arguments"}}`` with ``arguments`` the JSON
string τ² sent (a dict would become a struct of every tool's parameters in Arrow). The
domain's tools are one JSON string (``tools``), τ²'s ``Tool.openai_schema`` list, which
TRL's trainers ``json.loads`` before the chat template.

Preference pairs (:func:`pair_plan` chooses them, :func:`preference_row` writes one) follow
TRL's conversational preference format: ``prompt`` / ``chosen`` / ``rejected``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

# isort: off
from tau2_env.llm._tau2 import registry  # noqa: F401  (τ² through its quiet import, first)
from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
from tau2.data_model.message import SystemMessage
from tau2.utils.llm_utils import to_litellm_messages

# isort: on

from tau2_env.engine import catalog
from tau2_env.engine.episodes import messages_from_json
from tau2_env.llm.tau2_gen import is_valid_agent_history_message

# A reward at or above this passes (τ² rewards are 0 or 1, stored as floats).
PASSING = 0.999


class ToolCall(TypedDict):
    id: str
    type: str
    function: dict[str, str]  # {"name", "arguments" (a JSON string)}


class ChatMessage(TypedDict):
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str | None
    tool_calls: list[ToolCall] | None
    tool_call_id: str | None


class SFTRow(TypedDict):
    messages: list[ChatMessage]
    tools: str
    run_id: int
    domain: str
    task_id: str
    reward: float | None
    model: str
    kind: str
    evaluation_id: int | None


class PreferenceRow(TypedDict):
    prompt: list[ChatMessage]
    chosen: list[ChatMessage]
    rejected: list[ChatMessage]
    tools: str
    domain: str
    task_id: str
    chosen_run_id: int
    rejected_run_id: int
    chosen_reward: float
    rejected_reward: float
    chosen_model: str
    rejected_model: str


@functools.cache
def system_prompt(domain: str) -> str:
    """The system message τ²'s ``LLMAgent`` sends on ``domain``: its instructions and the
    domain's policy (``LLMAgent.system_prompt``)."""
    policy = catalog.get_domain(domain).policy
    return SYSTEM_PROMPT.format(domain_policy=policy, agent_instruction=AGENT_INSTRUCTION)


@functools.cache
def domain_tools(domain: str) -> str:
    """The agent's tools of ``domain`` as τ² sends them (``Tool.openai_schema`` each), as
    one JSON string."""
    return json.dumps([tool.schema for tool in catalog.get_domain(domain).tools])


def _chat_message(message: Mapping[str, Any]) -> ChatMessage:
    calls = message.get("tool_calls")
    return {
        "role": message["role"],
        "content": message.get("content"),
        "tool_calls": (
            [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    },
                }
                for call in calls
            ]
            if calls
            else None
        ),
        "tool_call_id": message.get("tool_call_id"),
    }


@functools.cache
def _parameter_order(domain: str) -> dict[str, dict[str, int]]:
    return {
        tool.name: {
            name: index
            for index, name in enumerate(
                tool.schema["function"]["parameters"].get("properties", {})
            )
        }
        for tool in catalog.get_domain(domain).tools
    }


def _in_parameter_order(domain: str, message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` with each tool call's arguments in the order of the tool's parameters.

    PostgreSQL's ``jsonb`` keeps no key order, so the order the model wrote them in is
    gone once stored; the schema's order is the one models are shown (and mostly follow).
    Arguments the tool does not declare come after, in the order they were read back."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    order = _parameter_order(domain)
    ordered = []
    for call in calls:
        rank = order.get(call.get("name"), {})
        arguments = call.get("arguments") or {}
        keys = sorted(arguments, key=lambda k: (rank.get(k, len(rank)), list(arguments).index(k)))
        ordered.append({**call, "arguments": {key: arguments[key] for key in keys}})
    return {**message, "tool_calls": ordered}


def agent_messages(domain: str, messages: Iterable[Mapping[str, Any]]) -> list[ChatMessage]:
    """The conversation as τ²'s agent was sent it: its system message, then every stored
    message (τ²'s ``model_dump`` dicts) the agent saw, through τ²'s ``to_litellm_messages``
    (tool call arguments in the order of the tool's parameters: see
    :func:`_in_parameter_order`)."""
    stored = [_in_parameter_order(domain, m) for m in messages]
    seen = [m for m in messages_from_json(stored) if is_valid_agent_history_message(m)]
    system = SystemMessage(role="system", content=system_prompt(domain))
    return [_chat_message(m) for m in to_litellm_messages([system, *seen])]


@dataclass(frozen=True)
class Conversation:
    """What a row is cut from: one finished run and its stored messages."""

    run_id: int
    domain: str
    task_id: str
    reward: float | None
    model: str
    kind: str
    evaluation_id: int | None
    messages: tuple[Mapping[str, Any], ...]


def sft_row(conversation: Conversation) -> SFTRow:
    """One SFT example: ``messages`` + ``tools`` (TRL's conversational language-modeling
    format with tools) and the run's metadata."""
    return {
        "messages": agent_messages(conversation.domain, conversation.messages),
        "tools": domain_tools(conversation.domain),
        "run_id": conversation.run_id,
        "domain": conversation.domain,
        "task_id": conversation.task_id,
        "reward": conversation.reward,
        "model": conversation.model,
        "kind": conversation.kind,
        "evaluation_id": conversation.evaluation_id,
    }


def passes(reward: float | None) -> bool:
    return reward is not None and reward >= PASSING


def fails(reward: float | None) -> bool:
    return reward is not None and reward < PASSING


def _common_opening(a: list[ChatMessage], b: list[ChatMessage]) -> int:
    length = 0
    for left, right in zip(a, b, strict=False):
        if left != right:
            break
        length += 1
    # Each side keeps at least its last message: chosen and rejected are never empty.
    return min(length, len(a) - 1, len(b) - 1)


def preference_row(chosen: SFTRow, rejected: SFTRow) -> PreferenceRow:
    """A DPO example from a passing and a failing row of the same task: ``prompt`` is the
    longest opening the two conversations share (at least the system message), ``chosen``
    and ``rejected`` what each said from there on."""
    cut = _common_opening(chosen["messages"], rejected["messages"])
    return {
        "prompt": chosen["messages"][:cut],
        "chosen": chosen["messages"][cut:],
        "rejected": rejected["messages"][cut:],
        "tools": chosen["tools"],
        "domain": chosen["domain"],
        "task_id": chosen["task_id"],
        "chosen_run_id": chosen["run_id"],
        "rejected_run_id": rejected["run_id"],
        "chosen_reward": chosen["reward"],
        "rejected_reward": rejected["reward"],
        "chosen_model": chosen["model"],
        "rejected_model": rejected["model"],
    }


ONE_PER_TASK = "one"
ALL_PAIRS = "all"
PAIRINGS = (ONE_PER_TASK, ALL_PAIRS)


@dataclass(frozen=True)
class Scored:
    """What pairing looks at: a run's id, its task and its reward."""

    run_id: int
    domain: str
    task_id: str
    reward: float | None


def pair_plan(runs: Iterable[Scored], *, pairing: str = ONE_PER_TASK) -> list[tuple[int, int]]:
    """Preference pairs ``(passing run id, failing run id)`` of the same (domain, task): a
    passing run (reward 1) against a failing one (reward 0); unscored runs take no part.

    Deterministic: within a task, passing and failing runs are taken in the order of
    their ids. ``one``: one pair per task, its lowest passing run id against its lowest
    failing one. ``all``: every passing run against every failing run of the task. Tasks
    come in the order of their lowest run id, a task's pairs together.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"Unknown pairing {pairing!r}; choose one of {', '.join(PAIRINGS)}")
    tasks: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
    for run in sorted(runs, key=lambda r: r.run_id):
        good, bad = tasks.setdefault((run.domain, run.task_id), ([], []))
        if passes(run.reward):
            good.append(run.run_id)
        elif fails(run.reward):
            bad.append(run.run_id)
    pairs: list[tuple[int, int]] = []
    for good, bad in tasks.values():
        if pairing == ONE_PER_TASK:
            pairs.extend(zip(good[:1], bad[:1], strict=False))
        else:
            pairs.extend((g, b) for g in good for b in bad)
    return pairs

"""What makes two evaluations' numbers comparable: their identity, and how two differ.

Two evaluations are ranked together, and pooled trial by trial, only when every part of
:class:`Identity` is the same: the domain, split and task set (``provenance
["task_set_hash"]``: the τ² catalogue the tasks came from), the τ² version that ran and
scored them, the mode (default / No-User / Oracle plan), the customer (its model and
where it runs), both sides' τ² LLM arguments (``None`` on older rows is τ²'s default)
and the step and tool-error limits. :func:`differences` says, in words, what differs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.evaluations.models import Evaluation
from apps.runs.presenters import ROUTER, ordered_args
from tau2_env.llm.llm_args import (
    DEFAULT_AGENT_ARGS,
    DEFAULT_USER_ARGS,
    LLMArgsError,
    llm_args_label,
    llm_args_of,
)

MODE_LABELS = {"default": "default", "no_user": "No-User", "oracle_plan": "Oracle plan"}


def side_args(value: Mapping[str, Any] | None, *, default: Mapping[str, Any]) -> dict[str, Any]:
    """A side's τ² llm_args as they are compared: τ²'s ``default`` for ``None``, numbers
    as τ² passes them (temperature 0 and 0.0 are one)."""
    if value is None:
        return dict(default)
    try:
        return ordered_args(llm_args_of(value, default=default))
    except LLMArgsError:  # an imported file's own arguments: compared as they are
        return ordered_args(dict(value))


def args_key(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, default=str)


CUSTOM_AGENT = "its team's own program"


def where(connection, evaluations: list[Evaluation]) -> str:
    """Where a side ran, in words: its connection, the router, or what imported files say."""
    if connection is not None:
        return connection.where_label
    if evaluations and all(e.status == Evaluation.Status.IMPORTED for e in evaluations):
        return "as imported tau2 run files name it"
    return ROUTER


@dataclass
class Identity:
    """Everything two evaluations must share for their numbers to be ranked or pooled."""

    split: str
    task_set_hash: str
    user_model: str
    tau2_version: str = ""
    mode: str = "default"
    max_steps: int = 200
    max_errors: int = 10
    user_where: str = ROUTER
    user_connection_id: int | None = None
    user_args: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_USER_ARGS))
    agent_args: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_AGENT_ARGS))
    # The agents are the teams' own programs (evaluations of an outside agent): taubench.com
    # lists such systems as "custom" submissions, apart from models under τ²'s LLMAgent.
    custom_agent: bool = False
    # A knowledge domain's retrieval configuration ("" for a domain without one).
    retrieval_config: str = ""
    # τ²'s wall-clock timeout in seconds (tau2 run --timeout; None: none, τ²'s default):
    # a conversation it ends scores 0, so it changes the numbers.
    timeout: float | None = None

    @property
    def key(self) -> tuple:
        # A custom agent, the retrieval configuration and the timeout only when there is
        # one, so the keys of every other evaluation (and the baselines stored under their
        # hashes) stay as they were.
        return (
            self._key
            + (("custom agent",) if self.custom_agent else ())
            + ((self.retrieval_config,) if self.retrieval_config else ())
            + ((("timeout", self.timeout),) if self.timeout is not None else ())
        )

    @property
    def timeout_label(self) -> str:
        return "no timeout" if self.timeout is None else f"a {self.timeout:g} s timeout"

    @property
    def _key(self) -> tuple:
        return (
            self.split,
            self.task_set_hash,
            self.tau2_version,
            self.mode,
            self.user_connection_id,
            self.user_model,
            args_key(self.user_args),
            args_key(self.agent_args),
            self.max_steps,
            self.max_errors,
        )

    @property
    def agents_label(self) -> str:
        return "custom agents (the teams' own programs)" if self.custom_agent else "models"

    @property
    def user_args_label(self) -> str:
        return llm_args_label(self.user_args)

    @property
    def agent_args_label(self) -> str:
        return llm_args_label(self.agent_args)

    @property
    def mode_label(self) -> str:
        return MODE_LABELS.get(self.mode, self.mode)


def identity_of(evaluation: Evaluation) -> Identity:
    provenance = evaluation.provenance or {}
    return Identity(
        split=evaluation.split,
        task_set_hash=str(provenance.get("task_set_hash") or "unknown"),
        tau2_version=str(provenance.get("tau2_version") or "unknown"),
        mode=getattr(evaluation, "mode", "default") or "default",
        max_steps=evaluation.max_steps,
        max_errors=evaluation.max_errors,
        user_model=evaluation.user_model,
        user_connection_id=evaluation.user_connection_id,
        user_where=where(evaluation.user_connection, [evaluation]),
        user_args=side_args(evaluation.user_llm_args, default=DEFAULT_USER_ARGS),
        # A custom agent has no τ² LLM arguments: its own program chose how to call its model.
        agent_args=(
            {}
            if getattr(evaluation, "external_agent", False)
            else side_args(evaluation.agent_llm_args, default=DEFAULT_AGENT_ARGS)
        ),
        custom_agent=bool(getattr(evaluation, "external_agent", False)),
        retrieval_config=evaluation.retrieval_config,
        timeout=evaluation.timeout,
    )


def differences(this: Identity, other: Identity) -> list[str]:
    """What differs between ``this`` and ``other``, each said as "another X (this, not
    other)"; empty when they may be ranked together."""
    out = []
    if this.custom_agent != other.custom_agent:
        out.append(f"other agents ({this.agents_label}, not {other.agents_label})")
    if this.split != other.split:
        out.append(f"another split ({this.split or 'none'}, not {other.split or 'none'})")
    if this.task_set_hash != other.task_set_hash:
        out.append(
            f"another task set ({this.task_set_hash[:16]}, not {other.task_set_hash[:16]}): "
            "the tasks or how they are scored were not the same"
        )
    if this.tau2_version != other.tau2_version:
        out.append(f"another τ² version ({this.tau2_version}, not {other.tau2_version})")
    if this.mode != other.mode:
        out.append(f"another mode ({this.mode_label}, not {other.mode_label})")
    if this.retrieval_config != other.retrieval_config:
        out.append(
            f"another retrieval configuration ({this.retrieval_config or 'none'}, not "
            f"{other.retrieval_config or 'none'})"
        )
    if this.user_model != other.user_model:
        out.append(f"another customer model ({this.user_model}, not {other.user_model})")
    if this.user_connection_id != other.user_connection_id:
        out.append(f"the customer elsewhere ({this.user_where}, not {other.user_where})")
    if args_key(this.user_args) != args_key(other.user_args):
        out.append(
            f"other customer LLM arguments ({this.user_args_label}, not {other.user_args_label})"
        )
    if args_key(this.agent_args) != args_key(other.agent_args) and not (
        this.custom_agent or other.custom_agent
    ):
        out.append(
            f"other agent LLM arguments ({this.agent_args_label}, not {other.agent_args_label})"
        )
    if (this.max_steps, this.max_errors) != (other.max_steps, other.max_errors):
        out.append(
            f"other limits ({this.max_steps} steps and {this.max_errors} tool errors, not "
            f"{other.max_steps} and {other.max_errors})"
        )
    if this.timeout != other.timeout:
        out.append(f"another timeout ({this.timeout_label}, not {other.timeout_label})")
    return out

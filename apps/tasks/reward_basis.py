"""How τ²-bench scores a task, in words, for the task page.

τ²'s evaluator multiplies one factor per component named in the task's reward basis
(``tau2.evaluator.evaluator.evaluate_simulation``): a task scores 1.0 only when every
component it is based on passes. Criteria a task lists outside its basis are shown
but do not count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COMPONENTS: dict[str, tuple[str, str]] = {
    "DB": (
        "Database check",
        "The expected actions are replayed on a fresh copy of the database; the conversation's "
        "final database must equal that result. Extra or missing writes fail it; reads don't "
        "matter.",
    ),
    "ENV_ASSERTION": (
        "Environment assertions",
        "Functions run on the final state of the environment (for telecom, also the customer's "
        "phone) must return the expected values.",
    ),
    "COMMUNICATE": (
        "Must-tell information",
        "Each listed piece of information must appear in what the agent said to the customer.",
    ),
    "NL_ASSERTION": (
        "Natural-language assertions",
        "An LLM judge reads the conversation and decides whether each assertion holds.",
    ),
    "ACTION": (
        "Expected actions",
        "Each expected tool call must appear in the conversation with matching arguments.",
    ),
}


@dataclass(frozen=True)
class ScoringComponent:
    code: str
    name: str
    explanation: str
    counts: bool  # part of the reward basis


def scoring_components(criteria: dict[str, Any], reward_basis: list[str]) -> list[ScoringComponent]:
    """Every component the task is scored on, then those it lists without scoring them."""
    present = {
        "DB": bool(criteria.get("actions")) or "DB" in reward_basis,
        "ENV_ASSERTION": bool(criteria.get("env_assertions")),
        "COMMUNICATE": bool(criteria.get("communicate_info")),
        "NL_ASSERTION": bool(criteria.get("nl_assertions")),
        "ACTION": "ACTION" in reward_basis,
    }
    components = []
    for code, (name, explanation) in COMPONENTS.items():
        counts = code in reward_basis
        if counts or present[code]:
            components.append(ScoringComponent(code, name, explanation, counts))
    components.sort(key=lambda c: not c.counts)
    return components

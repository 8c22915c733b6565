"""Evaluations as τ²-bench computes them: trial seeds, success, pass^k, confidence intervals.

Framework-free and exact to τ² (``tau2/run.py`` and ``tau2/metrics/agent_metrics.py``):

* trial seeds: ``random.seed(seed)`` then one ``random.randint(0, 1_000_000)`` per trial;
  trial *i* of every task runs with seed *i* (``tau2 run --seed 300`` gives 626729 first);
* success: a reward within 1e-6 of 1 (``is_successful``);
* pass^k of a task with *c* successes in *n* trials: ``comb(c, k) / comb(n, k)``, averaged
  over tasks; τ² uses k = 1 … the smallest number of trials any task has.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_SEED",
    "Metrics",
    "bootstrap_pass_hat_k",
    "compute_metrics",
    "is_successful",
    "pass_hat_k",
    "trial_seeds",
]

DEFAULT_SEED = 300  # `tau2 run`'s default --seed


def trial_seeds(seed: int | None, num_trials: int) -> list[int]:
    """The seed of each trial, exactly as ``tau2 run`` derives them from ``seed``.

    ``random.Random(seed)`` draws the same numbers as the module's ``random.seed(seed)``
    (which τ² calls), without touching the process's global generator.
    """
    if num_trials < 1:
        raise ValueError("Number of trials must be greater than 0")
    generator = random.Random(seed)  # noqa: S311 - reproducible trial seeds, not security
    return [generator.randint(0, 1_000_000) for _ in range(num_trials)]


def is_successful(reward: float | None) -> bool:
    """τ²'s success: a reward within 1e-6 of 1 (``None``: no reward, not a success)."""
    return reward is not None and (1 - 1e-6) <= reward <= (1 + 1e-6)


def pass_hat_k(num_trials: int, success_count: int, k: int) -> float:
    """τ²'s pass^k of one task: ``comb(c, k) / comb(n, k)``."""
    if num_trials < k:
        raise ValueError(f"Number of trials {num_trials} is less than k {k}.")
    return math.comb(success_count, k) / math.comb(num_trials, k)


@dataclass(frozen=True)
class Metrics:
    """What ``tau2.metrics.agent_metrics.compute_metrics`` reports, for the finished runs.

    ``pass_hat_ks`` maps k → pass^k for k = 1 … ``max_k`` (the fewest trials any task
    has); ``tasks`` counts the tasks with at least one finished trial.
    """

    avg_reward: float | None
    pass_hat_ks: dict[int, float] = field(default_factory=dict)
    max_k: int = 0
    tasks: int = 0
    runs: int = 0
    successes: int = 0


def compute_metrics(rewards_by_task: Mapping[str, Sequence[float | None]]) -> Metrics:
    """τ²'s metrics over the finished trials of each task (``None`` rewards count as
    failures with reward 0, as τ² records a run that ended without a score)."""
    per_task = {task: list(rewards) for task, rewards in rewards_by_task.items() if rewards}
    if not per_task:
        return Metrics(avg_reward=None)
    rewards = [0.0 if r is None else r for values in per_task.values() for r in values]
    max_k = min(len(values) for values in per_task.values())
    pass_hat_ks = {
        k: sum(
            pass_hat_k(len(values), sum(is_successful(r) for r in values), k)
            for values in per_task.values()
        )
        / len(per_task)
        for k in range(1, max_k + 1)
    }
    return Metrics(
        avg_reward=sum(rewards) / len(rewards),
        pass_hat_ks=pass_hat_ks,
        max_k=max_k,
        tasks=len(per_task),
        runs=len(rewards),
        successes=sum(is_successful(r) for r in rewards),
    )


def bootstrap_pass_hat_k(
    rewards_by_task: Mapping[str, Sequence[float | None]],
    *,
    ks: Iterable[int],
    samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[int, tuple[float, float]]:
    """Percentile bootstrap intervals of pass^k, resampling tasks with replacement.

    Returns k → (low, high) for each k no larger than the fewest trials of any task.
    """
    per_task = [
        (len(values), sum(is_successful(r) for r in values))
        for values in rewards_by_task.values()
        if values
    ]
    if not per_task:
        return {}
    max_k = min(n for n, _ in per_task)
    generator = random.Random(seed)  # noqa: S311 - resampling, not security
    intervals = {}
    for k in ks:
        if k > max_k:
            continue
        scores = [pass_hat_k(n, c, k) for n, c in per_task]
        means = sorted(
            sum(generator.choice(scores) for _ in scores) / len(scores) for _ in range(samples)
        )
        low = means[int((1 - confidence) / 2 * (samples - 1))]
        high = means[int((1 + confidence) / 2 * (samples - 1))]
        intervals[k] = (low, high)
    return intervals

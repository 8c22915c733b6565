"""Is a difference real, and how many trials would make it so: the maths, without Django.

* :func:`paired_difference` — the difference of pass^k between two evaluations of the
  same tasks, with a percentile bootstrap interval that resamples *tasks* (with
  replacement) and keeps each task's pair together, seeded so a page shows the same
  interval every time; :func:`difference_sentence` says it in words.
* :func:`trial_variance` and :func:`planned_half_width` — the trials planner: the
  expected 95% half-width of pass^1 with ``n`` tasks × ``k`` trials, from the
  trial-to-trial (within-task) variance of success the team observed on a domain.

pass^k per task is τ²'s ``comb(c, k) / comb(n, k)`` (``tau2_env.engine.evaluation.pass_hat_k``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tau2_env.engine.evaluation import is_successful, pass_hat_k

__all__ = [
    "DEFAULT_TRIAL_VARIANCE",
    "Difference",
    "Planner",
    "difference_sentence",
    "paired_difference",
    "planned_half_width",
    "trial_variance",
]

CONFIDENCE = 0.95
SAMPLES = 2000
SEED = 0
Z95 = 1.959963984540054
# Trial-to-trial variance of one run's success when the team has no repeated trials of
# the domain: a task that passes 3 times in 4 (0.75 × 0.25 ≈ 0.19) half the time and
# always or never the other half (0), i.e. ~0.1.
DEFAULT_TRIAL_VARIANCE = 0.1


def _task_scores(rewards: Sequence[float | None], k: int) -> float:
    return pass_hat_k(len(rewards), sum(is_successful(r) for r in rewards), k)


@dataclass(frozen=True)
class Difference:
    """``b − a`` of pass^k over the ``tasks`` both have with at least k trials each, in
    0…1 units; ``low``/``high`` the bootstrap interval (``confidence``)."""

    k: int
    a: float
    b: float
    delta: float
    low: float
    high: float
    tasks: int
    confidence: float = CONFIDENCE

    @property
    def distinguishable(self) -> bool:
        """The interval leaves out 0: one is ahead at this confidence."""
        return self.low > 0 or self.high < 0

    @property
    def sentence(self) -> str:
        return difference_sentence(self)


def paired_difference(
    a: Mapping[str, Sequence[float | None]],
    b: Mapping[str, Sequence[float | None]],
    *,
    k: int = 1,
    samples: int = SAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
) -> Difference | None:
    """pass^k of ``b`` minus that of ``a`` (rewards by task) over the tasks both scored
    at least ``k`` times, with a paired percentile bootstrap over those tasks.

    Deterministic: ``random.Random(seed)``, ``samples`` resamples. ``None`` when no task
    has k trials on both sides.
    """
    shared = [t for t in a if t in b and len(a[t]) >= k and len(b[t]) >= k]
    if not shared:
        return None
    shared.sort(key=task_order)  # the resampling must not depend on dict order
    left = [_task_scores(a[t], k) for t in shared]
    right = [_task_scores(b[t], k) for t in shared]
    deltas = [y - x for x, y in zip(left, right, strict=True)]
    n = len(deltas)
    generator = random.Random(seed)  # noqa: S311 - resampling, not security
    means = sorted(sum(generator.choices(deltas, k=n)) / n for _ in range(samples))
    low, high = percentile_interval(means, confidence)
    return Difference(
        k=k,
        a=sum(left) / n,
        b=sum(right) / n,
        delta=sum(deltas) / n,
        low=low,
        high=high,
        tasks=n,
        confidence=confidence,
    )


def percentile_interval(ordered: Sequence[float], confidence: float) -> tuple[float, float]:
    """The ``(1 ± confidence) / 2`` percentiles of the sorted ``ordered`` (nearest rank,
    as ``tau2_env.engine.evaluation.bootstrap_pass_hat_k`` takes them)."""
    last = len(ordered) - 1
    return (
        ordered[int((1 - confidence) / 2 * last)],
        ordered[int((1 + confidence) / 2 * last)],
    )


def _points(value: float) -> int:
    return round(value * 100)


def _signed(points: int) -> str:
    return f"+{points}" if points > 0 else ("0" if points == 0 else f"−{-points}")


def difference_sentence(difference: Difference, *, a: str = "A", b: str = "B") -> str:
    """E.g. "B is ahead by 6 points, 95% CI −2 to +14: not distinguishable at this size
    (50 tasks)." Points are pass^k × 100."""
    delta = _points(difference.delta)
    low, high = _points(difference.low), _points(difference.high)
    percent = round(difference.confidence * 100)
    interval = f"{percent}% CI {_signed(low)} to {_signed(high)}"
    size = f"{difference.tasks} task{'s' if difference.tasks != 1 else ''}"
    if delta == 0:
        head = f"{a} and {b} are level on pass^{difference.k}"
    else:
        ahead = b if delta > 0 else a
        head = f"{ahead} is ahead by {abs(delta)} point{'s' if abs(delta) != 1 else ''}"
    if difference.distinguishable:
        verdict = f"a real difference at {percent}% ({size})"
    else:
        verdict = f"not distinguishable at this size ({size})"
    return f"{head}, {interval}: {verdict}."


def trial_variance(groups: Sequence[Sequence[bool]]) -> tuple[float, int] | None:
    """The trial-to-trial variance of success: the mean over ``groups`` (one task's
    trials in one evaluation, at least two each) of the unbiased Bernoulli variance
    ``c (m − c) / (m (m − 1))``. Returns ``(variance, groups used)``, ``None`` when no
    group has two trials."""
    values = []
    for trials in groups:
        m = len(trials)
        if m < 2:
            continue
        c = sum(trials)
        values.append(c * (m - c) / (m * (m - 1)))
    if not values:
        return None
    return sum(values) / len(values), len(values)


def planned_half_width(*, tasks: int, trials: int, variance: float) -> float:
    """The expected 95% half-width of pass^1 (0…1) over ``tasks`` × ``trials`` when
    only the trials' noise varies (the same tasks run again): ``z · √(σ² / (n k))``."""
    if tasks < 1 or trials < 1:
        raise ValueError("tasks and trials must be at least 1")
    return Z95 * math.sqrt(max(variance, 0.0) / (tasks * trials))


@dataclass(frozen=True)
class Planner:
    """What the evaluation form says: ±points with ``tasks`` × ``trials`` and with
    twice the trials, and where the variance came from."""

    tasks: int
    trials: int
    variance: float
    observed: int  # (evaluation, task) pairs the variance was read from; 0: the default
    evaluations: int = 0  # how many evaluations those pairs (or ``unvaried``) came from
    # Pairs with repeated trials that never differed (each task always or never passed):
    # a variance of 0 is no evidence of precision, so the default stands in for it.
    unvaried: int = 0

    @property
    def points(self) -> int:
        return round(
            planned_half_width(tasks=self.tasks, trials=self.trials, variance=self.variance) * 100
        )

    @property
    def doubled(self) -> int:
        return self.trials * 2

    @property
    def doubled_points(self) -> int:
        return round(
            planned_half_width(tasks=self.tasks, trials=self.doubled, variance=self.variance) * 100
        )

    @property
    def gap_points(self) -> int:
        """How far apart two such evaluations' pass^1 must be, at least, to be told apart
        (the half-width of a difference of two independent ones: √2 ×)."""
        return round(
            math.sqrt(2)
            * planned_half_width(tasks=self.tasks, trials=self.trials, variance=self.variance)
            * 100
        )

    @property
    def basis(self) -> str:
        evaluations = f"{self.evaluations} evaluation{'s' if self.evaluations != 1 else ''}"
        if self.observed:
            return (
                f"from the trial-to-trial variance of success the team observed on this "
                f"domain ({self.variance:.3f}, over {self.observed} task × evaluation pairs "
                f"with repeated trials, from {evaluations})"
            )
        default = (
            f"a stated default trial-to-trial variance of {DEFAULT_TRIAL_VARIANCE} (a task "
            f"that passes 3 times in 4 half the time, always or never the other half)"
        )
        if self.unvaried:
            return (
                f"not from the team's repeated trials of this domain: in {self.unvaried} task "
                f"× evaluation pairs, from {evaluations}, every task passed all its trials or "
                f"none, a variance of 0 that says nothing of precision (a model failing every "
                f"run shows it too). Until an evaluation of this domain has a task passing some "
                f"of its trials and failing others: {default}"
            )
        return f"no repeated trials of this domain yet: {default}"


def task_order(task_id: str) -> tuple:
    """Task ids in natural order: "2" before "13", and "a2" before "a13"; ties by text."""
    parts = []
    for chunk in _chunks(task_id):
        parts.append((0, int(chunk), "") if _digit(chunk[0]) else (1, 0, chunk))
    return (tuple(parts), task_id)


def _chunks(text: str) -> list[str]:
    out: list[str] = []
    for char in text:
        if out and _digit(out[-1][-1]) == _digit(char):
            out[-1] += char
        else:
            out.append(char)
    return out


def _digit(char: str) -> bool:
    return char.isascii() and char.isdigit()

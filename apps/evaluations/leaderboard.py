"""The leaderboard: each agent model × customer model over the team's finished
evaluations of a whole split, with τ²'s pass^1 … pass^4 and bootstrap intervals.

Numbers are only comparable over the same tasks, scored the same way, against the same
simulated customer: rows are ranked together only when they share the split, the task
set (``provenance["task_set_hash"]``: the τ² catalogue the tasks came from) and the
customer model. Every other combination is a group of its own, which says how it differs
from the first group.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.core.cache import cache

from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tau2_env.evaluation import bootstrap_pass_hat_k, compute_metrics

KS = (1, 2, 3, 4)
BOOTSTRAP_SAMPLES = 1000
CONFIDENCE = 0.95
# Finished evaluations never change (one retried leaves the board while it runs and
# comes back with a new finishing time), so their numbers can be kept a while.
_CACHE_SECONDS = 24 * 3600
LEADERBOARD_STATUSES = (Evaluation.Status.COMPLETED, Evaluation.Status.IMPORTED)


@dataclass
class Score:
    """pass^k of a row, with its 95% interval (``None`` when some task has fewer than k
    scored trials, as τ² stops at the fewest trials of any task)."""

    k: int
    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass
class Row:
    agent_model: str
    user_model: str
    evaluations: list[Evaluation]
    scores: list[Score]
    avg_reward: float | None
    runs: int
    tasks: int
    cost_per_task: Decimal | None  # mean cost of one conversation; None: none priced
    unpriced: int
    date: datetime
    rank: int = 0

    @property
    def pass_1(self) -> float | None:
        return self.scores[0].value if self.scores else None


@dataclass
class Group:
    split: str
    task_set_hash: str
    user_model: str
    rows: list[Row] = field(default_factory=list)
    reason: str = ""  # how it differs from the first group (why it is ranked apart)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.split, self.task_set_hash, self.user_model)


def _task_set(evaluation: Evaluation) -> str:
    return str((evaluation.provenance or {}).get("task_set_hash") or "unknown")


def _row_stats(evaluations: list[Evaluation]) -> dict:
    """τ²'s metrics and intervals over the evaluations' scored runs, pooled per task."""
    key = (
        "leaderboard:"
        + hashlib.sha256(
            ",".join(
                f"{e.pk}@{(e.finished_at or e.created_at).isoformat()}" for e in evaluations
            ).encode()
        ).hexdigest()
    )
    cached = cache.get(key)
    if cached is not None:
        return cached
    rewards: dict[str, list[float | None]] = defaultdict(list)
    costs: list[Decimal] = []
    unpriced = 0
    rows = (
        Run.objects.filter(evaluation__in=evaluations, status=Run.Status.COMPLETED)
        .order_by("evaluation_id", "trial", "id")
        .values_list("task__task_id", "reward", "cost_usd")
    )
    for task_id, reward, cost in rows.iterator(chunk_size=5000):
        rewards[task_id].append(reward)
        if cost is None:
            unpriced += 1
        else:
            costs.append(cost)
    metrics = compute_metrics(rewards)
    intervals = bootstrap_pass_hat_k(
        rewards, ks=KS, samples=BOOTSTRAP_SAMPLES, confidence=CONFIDENCE
    )
    stats = {
        "pass_hat_ks": metrics.pass_hat_ks,
        "intervals": intervals,
        "avg_reward": metrics.avg_reward,
        "runs": metrics.runs,
        "tasks": metrics.tasks,
        "cost_per_task": sum(costs, Decimal(0)) / len(costs) if costs else None,
        "unpriced": unpriced,
    }
    cache.set(key, stats, _CACHE_SECONDS)
    return stats


def _row(agent_model: str, user_model: str, evaluations: list[Evaluation]) -> Row:
    stats = _row_stats(evaluations)
    scores = []
    for k in KS:
        value = stats["pass_hat_ks"].get(k)
        low, high = stats["intervals"].get(k, (None, None))
        scores.append(Score(k=k, value=value, low=low, high=high))
    return Row(
        agent_model=agent_model,
        user_model=user_model,
        evaluations=sorted(evaluations, key=lambda e: e.pk),
        scores=scores,
        avg_reward=stats["avg_reward"],
        runs=stats["runs"],
        tasks=stats["tasks"],
        cost_per_task=stats["cost_per_task"],
        unpriced=stats["unpriced"],
        date=max(e.finished_at or e.created_at for e in evaluations),
    )


def _why_apart(group: Group, first: Group) -> str:
    differences = []
    if group.split != first.split:
        differences.append(f"another split ({group.split}, not {first.split})")
    if group.task_set_hash != first.task_set_hash:
        differences.append(
            f"another task set ({group.task_set_hash[:16]}, not {first.task_set_hash[:16]}): "
            "the tasks or how they are scored were not the same"
        )
    if group.user_model != first.user_model:
        differences.append(f"another customer model ({group.user_model}, not {first.user_model})")
    return "Not ranked with the first group: " + "; ".join(differences) + "."


def leaderboard(*, domain: str) -> list[Group]:
    """The groups of ``domain``'s leaderboard, the largest first, each ranked by pass^1
    (then average reward). Only completed or imported evaluations of a whole split count;
    a row pools every such evaluation of its agent and customer models in its group."""
    evaluations = list(
        Evaluation.objects.filter(domain=domain, full_split=True, status__in=LEADERBOARD_STATUSES)
        .select_related("created_by")
        .defer("task_ids", "summary")
        .order_by("created_at", "id")
    )
    grouped: dict[tuple[str, str, str], dict[str, list[Evaluation]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for evaluation in evaluations:
        key = (evaluation.split, _task_set(evaluation), evaluation.user_model)
        grouped[key][evaluation.agent_model].append(evaluation)
    groups = []
    for (split, task_set_hash, user_model), by_agent in grouped.items():
        group = Group(split=split, task_set_hash=task_set_hash, user_model=user_model)
        group.rows = [_row(agent, user_model, evs) for agent, evs in by_agent.items()]
        group.rows.sort(
            key=lambda r: (
                -(r.pass_1 if r.pass_1 is not None else -1),
                -(r.avg_reward if r.avg_reward is not None else -1),
                r.agent_model,
            )
        )
        for rank, row in enumerate(group.rows, 1):
            row.rank = rank
        groups.append(group)
    groups.sort(
        key=lambda g: (
            -len(g.rows),
            -sum(r.runs for r in g.rows),
            -max(r.date for r in g.rows).timestamp(),
        )
    )
    for group in groups[1:]:
        group.reason = _why_apart(group, groups[0])
    return groups

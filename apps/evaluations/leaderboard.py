"""The leaderboard: each agent model × customer model over the team's finished
evaluations of a whole split, with τ²'s pass^1 … pass^4 and bootstrap intervals.

Numbers are only comparable over the same tasks, scored the same way, against the same
simulated customer run the same way: rows are ranked together only when they share the
split, the task set (``provenance["task_set_hash"]``: the τ² catalogue the tasks came
from), the customer (its model and where it runs) and both sides' τ² LLM arguments
(``None`` on older rows is τ²'s default). Every other combination is a group of its own,
which says how it differs from the first group. A row is an agent model where it ran;
each says whether it is comparable to taubench.com (``presenters.comparability``).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.cache import cache

from apps.evaluations.models import Evaluation
from apps.evaluations.presenters import Comparability, comparability, leaderboard_split_size
from apps.runs.models import Run
from apps.runs.presenters import ROUTER, ordered_args
from tau2_env.evaluation import bootstrap_pass_hat_k, compute_metrics
from tau2_env.llm_args import (
    DEFAULT_AGENT_ARGS,
    DEFAULT_USER_ARGS,
    LLMArgsError,
    llm_args_label,
    llm_args_of,
)
from tau2_env.results import LEADERBOARD

KS = tuple(range(1, LEADERBOARD.trials + 1))  # taubench.com's pass^1 … pass^4
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
    comparability: Comparability
    scores: list[Score]
    avg_reward: float | None
    runs: int
    tasks: int
    cost_per_task: Decimal | None  # mean cost of one conversation; None: none priced
    unpriced: int
    date: datetime
    agent_where: str = ROUTER  # where the agent ran: a connection, or the router
    rank: int = 0

    @property
    def pass_1(self) -> float | None:
        return self.scores[0].value if self.scores else None


@dataclass
class Group:
    """Rows ranked together: one split and task set, one customer (``user_model`` on
    ``user_where``) and one set of τ² llm_args per side (``user_args``, ``agent_args``)."""

    split: str
    task_set_hash: str
    user_model: str
    user_where: str = ROUTER
    user_connection_id: int | None = None
    user_args: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_USER_ARGS))
    agent_args: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_AGENT_ARGS))
    rows: list[Row] = field(default_factory=list)
    reason: str = ""  # how it differs from the first group (why it is ranked apart)

    @property
    def key(self) -> tuple:
        return (
            self.split,
            self.task_set_hash,
            self.user_connection_id,
            self.user_model,
            _args_key(self.user_args),
            _args_key(self.agent_args),
        )

    @property
    def user_args_label(self) -> str:
        return llm_args_label(self.user_args)

    @property
    def agent_args_label(self) -> str:
        return llm_args_label(self.agent_args)


def _task_set(evaluation: Evaluation) -> str:
    return str((evaluation.provenance or {}).get("task_set_hash") or "unknown")


def side_args(value: Mapping[str, Any] | None, *, default: Mapping[str, Any]) -> dict[str, Any]:
    """A side's τ² llm_args as they are compared: τ²'s ``default`` for ``None``, numbers
    as τ² passes them (temperature 0 and 0.0 are one)."""
    if value is None:
        return dict(default)
    try:
        return ordered_args(llm_args_of(value, default=default))
    except LLMArgsError:  # an imported file's own arguments: compared as they are
        return ordered_args(dict(value))


def _args_key(args: Mapping[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, default=str)


def _where(connection, evaluations: list[Evaluation]) -> str:
    if connection is not None:
        return connection.where_label
    if all(e.status == Evaluation.Status.IMPORTED for e in evaluations):
        return "as imported tau2 run files name it"
    return ROUTER


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


def _row_comparability(evaluations: list[Evaluation], split_size: int | None) -> Comparability:
    """Comparable when every pooled evaluation is; else each one's reasons (named by
    evaluation when the row pools several)."""
    marks = [comparability(e, split_size=split_size) for e in evaluations]
    if all(m.comparable for m in marks):
        return Comparability(comparable=True, via=marks[0].via if marks else "")
    reasons: list[str] = []
    for evaluation, mark in zip(evaluations, marks, strict=True):
        for reason in mark.reasons:
            text = reason if len(evaluations) == 1 else f"#{evaluation.pk}: {reason}"
            if text not in reasons:
                reasons.append(text)
    return Comparability(comparable=False, reasons=tuple(reasons))


def _row(
    agent_model: str, user_model: str, evaluations: list[Evaluation], *, split_size: int | None
) -> Row:
    evaluations = sorted(evaluations, key=lambda e: e.pk)
    stats = _row_stats(evaluations)
    scores = []
    for k in KS:
        value = stats["pass_hat_ks"].get(k)
        low, high = stats["intervals"].get(k, (None, None))
        scores.append(Score(k=k, value=value, low=low, high=high))
    return Row(
        agent_model=agent_model,
        user_model=user_model,
        evaluations=evaluations,
        comparability=_row_comparability(evaluations, split_size),
        agent_where=_where(evaluations[0].agent_connection, evaluations),
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
    if group.user_connection_id != first.user_connection_id:
        differences.append(f"the customer elsewhere ({group.user_where}, not {first.user_where})")
    if _args_key(group.user_args) != _args_key(first.user_args):
        differences.append(
            f"other customer LLM arguments ({group.user_args_label}, not {first.user_args_label})"
        )
    if _args_key(group.agent_args) != _args_key(first.agent_args):
        differences.append(
            f"other agent LLM arguments ({group.agent_args_label}, not {first.agent_args_label})"
        )
    return "Not ranked with the first group: " + "; ".join(differences) + "."


def leaderboard(*, domain: str) -> list[Group]:
    """The groups of ``domain``'s leaderboard, the largest first, each ranked by pass^1
    (then average reward). Only completed or imported evaluations of a whole split count;
    a row pools every such evaluation of its agent model (where it ran) in its group:
    the same split, task set, customer (model and where) and both sides' LLM arguments."""
    evaluations = list(
        Evaluation.objects.filter(domain=domain, full_split=True, status__in=LEADERBOARD_STATUSES)
        .select_related("created_by", "agent_connection", "user_connection")
        .defer("summary")
        .order_by("created_at", "id")
    )
    split_size = leaderboard_split_size(domain)
    grouped: dict[tuple, dict[tuple, list[Evaluation]]] = defaultdict(lambda: defaultdict(list))
    made: dict[tuple, Group] = {}
    for evaluation in evaluations:
        group = Group(
            split=evaluation.split,
            task_set_hash=_task_set(evaluation),
            user_model=evaluation.user_model,
            user_connection_id=evaluation.user_connection_id,
            user_args=side_args(evaluation.user_llm_args, default=DEFAULT_USER_ARGS),
            agent_args=side_args(evaluation.agent_llm_args, default=DEFAULT_AGENT_ARGS),
        )
        made.setdefault(group.key, group)
        grouped[group.key][(evaluation.agent_connection_id, evaluation.agent_model)].append(
            evaluation
        )
    groups = []
    for key, by_agent in grouped.items():
        group = made[key]
        members = [e for evs in by_agent.values() for e in evs]
        group.user_where = _where(members[0].user_connection, members)
        group.rows = [
            _row(agent, group.user_model, evs, split_size=split_size)
            for (_, agent), evs in by_agent.items()
        ]
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

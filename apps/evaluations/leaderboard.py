"""The leaderboard: each agent model × customer model over the team's finished
evaluations of a whole split, with τ²'s pass^1 … pass^4 and bootstrap intervals.

Numbers are only comparable over the same tasks, scored the same way, against the same
simulated customer run the same way: rows are ranked together only when their
evaluations share one :class:`~apps.evaluations.pooling.Identity` — the split, the task
set, the τ² version, the mode, the customer (its model and where it runs), both sides'
τ² LLM arguments and the step and tool-error limits. Every other combination is a group
of its own, which says how it differs from the first group. A row is an agent model
where it ran; each says whether it is comparable to taubench.com
(``presenters.comparability``).

A row pools its evaluations' scored runs task by task, as τ² would count them
(``selectors.is_scored``: a model's own failures at 0; infrastructure, provider and
budget failures and stopped runs left out, and counted by why). The same simulation
imported twice (``Run.provenance["simulation_hash"]``, written by the import) is counted
once, and the row says which evaluations repeat which. Each row also has pass^k without
the runs with a critical user-simulator error, and the difference to the row below with
a paired bootstrap interval over tasks (``significance.paired_difference``).

The paper's published pass^1 (:data:`PUBLISHED`) is shown apart, never ranked.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.core.cache import cache

from apps.evaluations import selectors
from apps.evaluations.models import Evaluation
from apps.evaluations.pooling import (
    CUSTOM_AGENT,
    Identity,
    differences,
    identity_of,
    where,
)
from apps.evaluations.presenters import Comparability, comparability, leaderboard_split_size
from apps.evaluations.significance import Difference, difference_sentence, paired_difference
from apps.runs.models import Run
from apps.runs.presenters import ROUTER
from tau2_env.engine.evaluation import bootstrap_pass_hat_k, compute_metrics
from tau2_env.engine.results import LEADERBOARD

KS = tuple(range(1, LEADERBOARD.trials + 1))  # taubench.com's pass^1 … pass^4
BOOTSTRAP_SAMPLES = 1000
CONFIDENCE = 0.95
# Finished evaluations never change (one retried leaves the board while it runs and
# comes back with a new finishing time), so their numbers can be kept a while; the
# review labels that weigh on them are part of the key.
_CACHE_SECONDS = 24 * 3600
LEADERBOARD_STATUSES = (Evaluation.Status.COMPLETED, Evaluation.Status.IMPORTED)

PUBLISHED_SOURCE = "https://taubench.com/research"
# τ²-bench's paper, pass^1 in percent: 4 trials, gpt-4.1 as the customer (taubench.com's
# research page). Published, not run here: never ranked with the team's own rows.
PUBLISHED = {
    "retail": (("gpt-4.1", 74.0), ("claude-3.7-sonnet", 72.1), ("o4-mini", 68.3)),
    "airline": (("claude-3.7-sonnet", 64.2), ("gpt-4.1", 56.0), ("o4-mini", 52.1)),
    "telecom": (("o4-mini", 50.2), ("claude-3.7-sonnet", 49.0), ("gpt-4.1", 34.0)),
}


@dataclass(frozen=True)
class Published:
    """One published pass^1 row (0…1), with where it was published."""

    agent_model: str
    pass_1: float
    trials: int = 4
    user_model: str = "gpt-4.1"
    source: str = PUBLISHED_SOURCE


def published(*, domain: str) -> list[Published]:
    """The paper's pass^1 rows of ``domain`` (best first), empty for another domain."""
    return [Published(agent_model=m, pass_1=v / 100) for m, v in PUBLISHED.get(domain, ())]


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
    # Mean cost of one run (one conversation), every priced call: the agent's, the
    # customer's and τ²'s NL judge's; None: no run whose every call was priced.
    cost_per_run: Decimal | None
    agent_cost_per_run: Decimal | None  # the agent's calls alone (τ²'s agent cost)
    unpriced: int  # scored runs some call of which has no price
    date: datetime
    agent_where: str = ROUTER  # where the agent ran: a connection, or the router
    rank: int = 0
    left_out: dict[str, int] = field(default_factory=dict)  # by selectors.LEFT_OUT key
    failures_counted: int = 0
    duplicates: int = 0  # simulations imported again, counted once
    duplicate_notes: list[str] = field(default_factory=list)
    sim_error_runs: int = 0
    clean_scores: list[Score] = field(default_factory=list)
    clean_runs: int = 0
    rewards: dict[str, list[float | None]] = field(default_factory=dict, repr=False)
    versus_next: Difference | None = None  # this row minus the one below, pass^1
    versus_next_sentence: str = ""

    @property
    def pass_1(self) -> float | None:
        return self.scores[0].value if self.scores else None

    @property
    def runs_left_out(self) -> int:
        return sum(self.left_out.values())

    @property
    def left_out_labels(self) -> list[tuple[str, int]]:
        return [(selectors.LEFT_OUT[key], n) for key, n in self.left_out.items()]


@dataclass
class Group:
    """Rows ranked together: evaluations of one :class:`Identity`."""

    identity: Identity
    rows: list[Row] = field(default_factory=list)
    reason: str = ""  # how it differs from the first group (why it is ranked apart)

    @property
    def key(self) -> tuple:
        return self.identity.key

    def __getattr__(self, name: str) -> Any:
        # split, task_set_hash, user_model, user_where, user_args, agent_args, mode, … and
        # their labels: the identity's.
        if name.startswith("__") or name == "identity":
            raise AttributeError(name)
        return getattr(self.identity, name)


def _row_stats(evaluations: list[Evaluation]) -> dict:
    """τ²'s metrics and intervals over the evaluations' scored runs, pooled per task,
    each simulation once; the same without the critical user-simulator errors."""
    sim_errors = selectors.sim_error_run_ids(evaluation_ids=[e.pk for e in evaluations])
    key = (
        "leaderboard:v3:"
        + hashlib.sha256(
            (
                ",".join(
                    f"{e.pk}@{(e.finished_at or e.created_at).isoformat()}" for e in evaluations
                )
                + "|"
                + ",".join(map(str, sorted(sim_errors)))
            ).encode()
        ).hexdigest()
    )
    cached = cache.get(key)
    if cached is not None:
        return cached
    rewards: dict[str, list[float | None]] = defaultdict(list)
    clean: dict[str, list[float | None]] = defaultdict(list)
    totals: list[Decimal] = []
    agent_costs: list[Decimal] = []
    unpriced = 0
    left_out: Counter = Counter()
    failures_counted = 0
    seen: dict[str, int] = {}  # simulation hash → the evaluation that counted it
    repeats: dict[tuple[int, int], int] = Counter()  # (evaluation, of evaluation) → runs
    rows = (
        Run.objects.filter(evaluation__in=evaluations, status__in=Run.FINAL)
        .order_by("evaluation_id", "trial", "id")
        .values(
            "id",
            "evaluation_id",
            "task__task_id",
            "status",
            "failure",
            "reward",
            "cost_usd",
            "user_cost_usd",
            "judge_cost_usd",
            "prompt_tokens",
            "completion_tokens",
            "user_prompt_tokens",
            "user_completion_tokens",
            "judge_prompt_tokens",
            "judge_completion_tokens",
            "provenance__simulation_hash",
        )
    )
    for run in rows.iterator(chunk_size=5000):
        reason = selectors.left_out_reason(run)
        if reason:
            left_out[reason] += 1
            continue
        if not selectors.is_scored(run):
            continue
        digest = run["provenance__simulation_hash"]
        if digest and digest in seen:
            repeats[(run["evaluation_id"], seen[digest])] += 1
            continue
        if digest:
            seen[digest] = run["evaluation_id"]
        reward = run["reward"] if run["status"] == Run.Status.COMPLETED else None
        failures_counted += run["status"] == Run.Status.FAILED
        rewards[run["task__task_id"]].append(reward)
        if run["id"] not in sim_errors:
            clean[run["task__task_id"]].append(reward)
        if run["cost_usd"] is not None:
            agent_costs.append(run["cost_usd"])
        total = _run_cost(run)
        if total is None:
            unpriced += 1
        else:
            totals.append(total)
    metrics = compute_metrics(rewards)
    clean_metrics = compute_metrics(clean)
    stats = {
        "pass_hat_ks": metrics.pass_hat_ks,
        "intervals": bootstrap_pass_hat_k(
            rewards, ks=KS, samples=BOOTSTRAP_SAMPLES, confidence=CONFIDENCE
        ),
        "clean_pass_hat_ks": clean_metrics.pass_hat_ks,
        "clean_intervals": bootstrap_pass_hat_k(
            clean, ks=KS, samples=BOOTSTRAP_SAMPLES, confidence=CONFIDENCE
        ),
        "clean_runs": clean_metrics.runs,
        "sim_error_runs": metrics.runs - clean_metrics.runs,
        "avg_reward": metrics.avg_reward,
        "runs": metrics.runs,
        "tasks": metrics.tasks,
        "cost_per_run": sum(totals, Decimal(0)) / len(totals) if totals else None,
        "agent_cost_per_run": (
            sum(agent_costs, Decimal(0)) / len(agent_costs) if agent_costs else None
        ),
        "unpriced": unpriced,
        "left_out": {k: left_out[k] for k in selectors.LEFT_OUT if left_out[k]},
        "failures_counted": failures_counted,
        "repeats": dict(repeats),
        "rewards": {task: list(values) for task, values in rewards.items()},
    }
    cache.set(key, stats, _CACHE_SECONDS)
    return stats


def _run_cost(run: dict[str, Any]) -> Decimal | None:
    """A run's agent, customer and judge calls together; ``None`` when it made no calls
    or a role that made calls has no price (unknown, never $0)."""
    parts = (
        (run["prompt_tokens"] + run["completion_tokens"], run["cost_usd"]),
        (run["user_prompt_tokens"] + run["user_completion_tokens"], run["user_cost_usd"]),
        (run["judge_prompt_tokens"] + run["judge_completion_tokens"], run["judge_cost_usd"]),
    )
    used = [cost for tokens, cost in parts if tokens]
    if not used or any(cost is None for cost in used):
        return None
    return sum(used, Decimal(0))


def _scores(values: dict, intervals: dict) -> list[Score]:
    out = []
    for k in KS:
        low, high = intervals.get(k, (None, None))
        out.append(Score(k=k, value=values.get(k), low=low, high=high))
    return out


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
    notes = [
        f"#{again}'s {n} simulation{'s' if n != 1 else ''} repeat{'s' if n == 1 else ''} "
        f"#{first}'s (the same file imported again): counted once"
        for (again, first), n in sorted(stats["repeats"].items())
    ]
    return Row(
        agent_model=agent_model,
        user_model=user_model,
        evaluations=evaluations,
        comparability=_row_comparability(evaluations, split_size),
        agent_where=(
            CUSTOM_AGENT
            if evaluations[0].external_agent
            else where(evaluations[0].agent_connection, evaluations)
        ),
        scores=_scores(stats["pass_hat_ks"], stats["intervals"]),
        clean_scores=_scores(stats["clean_pass_hat_ks"], stats["clean_intervals"]),
        clean_runs=stats["clean_runs"],
        sim_error_runs=stats["sim_error_runs"],
        avg_reward=stats["avg_reward"],
        runs=stats["runs"],
        tasks=stats["tasks"],
        cost_per_run=stats["cost_per_run"],
        agent_cost_per_run=stats["agent_cost_per_run"],
        unpriced=stats["unpriced"],
        left_out=stats["left_out"],
        failures_counted=stats["failures_counted"],
        duplicates=sum(stats["repeats"].values()),
        duplicate_notes=notes,
        rewards=stats["rewards"],
        date=max(e.finished_at or e.created_at for e in evaluations),
    )


def _why_apart(group: Group, first: Group) -> str:
    return (
        "Not ranked with the first group: "
        + "; ".join(differences(group.identity, first.identity))
        + "."
    )


def _versus_next(rows: list[Row]) -> None:
    """Each row's pass^1 against the row below it: paired over the tasks both scored."""
    for upper, lower in zip(rows, rows[1:], strict=False):
        difference = paired_difference(lower.rewards, upper.rewards, k=1)
        upper.versus_next = difference
        if difference is not None:
            upper.versus_next_sentence = difference_sentence(
                difference, a=lower.agent_model, b=upper.agent_model
            )


def leaderboard(*, domain: str) -> list[Group]:
    """The groups of ``domain``'s leaderboard, the largest first, each ranked by pass^1
    (then average reward). Only completed or imported evaluations of a whole split count;
    a row pools every such evaluation of its agent model (where it ran) in its group:
    one :class:`~apps.evaluations.pooling.Identity`."""
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
        identity = identity_of(evaluation)
        made.setdefault(identity.key, Group(identity=identity))
        grouped[identity.key][(evaluation.agent_connection_id, evaluation.agent_model)].append(
            evaluation
        )
    groups = []
    for key, by_agent in grouped.items():
        group = made[key]
        members = [e for evs in by_agent.values() for e in evs]
        group.identity.user_where = where(members[0].user_connection, members)
        group.rows = [
            _row(agent, group.identity.user_model, evs, split_size=split_size)
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
        _versus_next(group.rows)
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

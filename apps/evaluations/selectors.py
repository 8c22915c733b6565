"""Reads of evaluations: the list, one evaluation, its progress, matrix and τ²'s metrics."""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from statistics import mean
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from apps.evaluations.models import Evaluation, EvaluationJob
from apps.evaluations.pooling import differences, identity_of
from apps.evaluations.significance import (
    DEFAULT_TRIAL_VARIANCE,
    Difference,
    Planner,
    paired_difference,
    task_order,
    trial_variance,
)
from apps.evaluations.summary import EvaluationSummary, SummaryUnreadable, TaskReward
from apps.runs.models import ReviewLabel, Run
from tau2_env.engine.evaluation import compute_metrics, is_successful

# Which final runs τ²'s metrics count. τ² scores every simulation it ran, a model's own
# failures at 0 (an agent or customer error, the step limit: ``tau2`` records them with
# reward 0), and leaves out only infrastructure errors. Here a completed run counts with
# its reward, a failure of the conversation itself (``Run.Failure.CONVERSATION``: the
# model's output broke the conversation or its scoring) counts as reward 0, and every
# other final run is left out, for the reason said: none of them is the model's answer.
COUNTED_FAILURES = frozenset({Run.Failure.CONVERSATION})
LEFT_OUT = {
    Run.Failure.INFRASTRUCTURE.value: "infrastructure failure (database, broker or worker)",
    Run.Failure.TRANSIENT.value: "provider errors or rate limits that outlasted the retries",
    Run.Failure.PROVIDER.value: "the provider refused the key or the model (401/402/403/404)",
    Run.Failure.BUDGET.value: "a connection's monthly budget was reached",
    "unrecorded": "failed, its cause not recorded",
    Run.Status.STOPPED.value: "stopped before it ended",
}

# What the live page and the metrics read of each run: narrow columns only (a 2,285-task
# telecom evaluation has ~9,000 runs), never the messages.
_RUN_COLUMNS = (
    "id",
    "task__task_id",
    "trial",
    "status",
    "failure",
    "reward",
    "termination_reason",
    "n_messages",
    "n_tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "user_prompt_tokens",
    "user_completion_tokens",
    "user_cost_usd",
    "judge_prompt_tokens",
    "judge_completion_tokens",
    "judge_cost_usd",
    "embedding_prompt_tokens",
    "embedding_cost_usd",
    "started_at",
    "finished_at",
    "dispatched_at",
    "reward_info__reward_breakdown",
    "reward_info__reward_basis",
)


def left_out_reason(run: dict[str, Any]) -> str | None:
    """Why a final run is left out of τ²'s metrics (a key of :data:`LEFT_OUT`), ``None``
    when it counts (see :data:`COUNTED_FAILURES`) or has not ended."""
    if run["status"] == Run.Status.STOPPED:
        return Run.Status.STOPPED.value
    if run["status"] != Run.Status.FAILED or run["failure"] in COUNTED_FAILURES:
        return None
    return run["failure"] if run["failure"] in LEFT_OUT else "unrecorded"


def is_scored(run: dict[str, Any]) -> bool:
    """Whether τ²'s metrics count the run: completed, or failed by the model's own
    conversation (reward 0)."""
    if run["status"] == Run.Status.COMPLETED:
        return True
    return run["status"] == Run.Status.FAILED and run["failure"] in COUNTED_FAILURES


def sim_error_labels() -> Q:
    """The review labels that mark a run as having a critical user-simulator error: a
    person's, or an auto-review finding a person accepted (issue 21's contract)."""
    condition = Q(
        category=ReviewLabel.Category.USER_SIM_ERROR, severity=ReviewLabel.Severity.CRITICAL
    )
    fields = {f.name for f in ReviewLabel._meta.get_fields()}
    if {"origin", "status"} <= fields:
        condition &= Q(origin="human") | Q(origin="auto", status="accepted")
    return condition


# On a query of runs: whether the run has a critical user-simulator error.
SIM_ERROR = Exists(ReviewLabel.objects.filter(sim_error_labels(), run_id=OuterRef("pk")))


def sim_error_run_ids(*, evaluation_ids) -> set[int]:
    """The runs of those evaluations with a critical user-simulator error."""
    return set(
        ReviewLabel.objects.filter(sim_error_labels(), run__evaluation_id__in=evaluation_ids)
        .values_list("run_id", flat=True)
        .distinct()
    )


def _has_calls(run: dict[str, Any]) -> bool:
    return bool(
        run["prompt_tokens"]
        or run["completion_tokens"]
        or run["user_prompt_tokens"]
        or run["user_completion_tokens"]
        or run["judge_prompt_tokens"]
        or run["judge_completion_tokens"]
        or run.get("embedding_prompt_tokens")
    )


def _run_total_cost(run: dict[str, Any]) -> Decimal | None:
    """A run's agent, customer and judge cost together (as its page totals them);
    ``None`` when it made no calls or a role that made calls has no price (unknown,
    never counted as $0)."""
    parts = (
        (run["prompt_tokens"] + run["completion_tokens"], run["cost_usd"]),
        (run["user_prompt_tokens"] + run["user_completion_tokens"], run["user_cost_usd"]),
        (run["judge_prompt_tokens"] + run["judge_completion_tokens"], run["judge_cost_usd"]),
        # A knowledge domain's embeddings (read where the caller asked for them).
        (run.get("embedding_prompt_tokens") or 0, run.get("embedding_cost_usd")),
    )
    used = [cost for tokens, cost in parts if tokens]
    if not used or any(cost is None for cost in used):
        return None
    return sum(used, Decimal(0))


def evaluation_cost_per_run(evaluation: Evaluation) -> Decimal | None:
    """The mean cost of a run (agent, customer and judge) over the runs whose every call
    was priced, as ``EvaluationSummary.mean_total_cost_usd`` says it, read now in one
    query of the cost columns; ``None`` when no run was priced."""
    columns = (
        "prompt_tokens",
        "completion_tokens",
        "cost_usd",
        "user_prompt_tokens",
        "user_completion_tokens",
        "user_cost_usd",
        "judge_prompt_tokens",
        "judge_completion_tokens",
        "judge_cost_usd",
        "embedding_prompt_tokens",
        "embedding_cost_usd",
    )
    runs = Run.objects.filter(evaluation=evaluation).values(*columns)
    totals = [t for t in map(_run_total_cost, runs) if t is not None]
    return sum(totals, Decimal(0)) / len(totals) if totals else None


def evaluation_get(*, pk: int) -> Evaluation:
    try:
        # With its standing review (each run reviewed as it ends), which its page shows.
        return Evaluation.objects.select_related(
            "created_by", "standing_review__requested_by", "standing_review__reviewer_connection"
        ).get(pk=pk)
    except Evaluation.DoesNotExist:
        raise Http404(f"No evaluation {pk}") from None


@dataclass(frozen=True)
class EvaluationFilters:
    domain: str = ""
    agent_model: str = ""
    status: str = ""
    mine: bool = False

    @classmethod
    def from_params(cls, params) -> EvaluationFilters:
        def text(name: str) -> str:
            return (params.get(name) or "").replace("\x00", "").strip()[:255]

        status = text("status")
        return cls(
            domain=text("domain"),
            agent_model=text("model"),
            status=status if status in Evaluation.Status.values else "",
            mine=text("mine") in ("1", "true", "on"),
        )

    def as_query(self) -> dict[str, str]:
        query = {"domain": self.domain, "model": self.agent_model, "status": self.status}
        if self.mine:
            query["mine"] = "1"
        return {k: v for k, v in query.items() if v}


def evaluation_list(*, filters: EvaluationFilters, user=None) -> QuerySet[Evaluation]:
    rows = Evaluation.objects.select_related("created_by").defer("task_ids")
    if filters.domain:
        rows = rows.filter(domain=filters.domain)
    if filters.agent_model:
        rows = rows.filter(agent_model__icontains=filters.agent_model)
    if filters.status:
        rows = rows.filter(status=filters.status)
    if filters.mine and user is not None and user.is_authenticated:
        rows = rows.filter(created_by=user)
    return rows.order_by("-created_at", "-id")


def evaluation_runs(evaluation: Evaluation) -> list[dict[str, Any]]:
    """The evaluation's runs as narrow dicts (see ``_RUN_COLUMNS``), each with
    ``sim_error``: whether it has a critical user-simulator error."""
    return list(
        Run.objects.filter(evaluation=evaluation)
        .annotate(sim_error=SIM_ERROR)
        .order_by("trial", "id")
        .values(*_RUN_COLUMNS, "sim_error")
    )


def rewards_by_task(
    runs: list[dict[str, Any]], *, without: frozenset[int] | set[int] = frozenset()
) -> dict[str, list[float | None]]:
    """Each task's rewards of its scored runs (:func:`is_scored`; a counted failure's is
    ``None``, which τ²'s metrics read as 0), but for the runs whose id is in ``without``."""
    by_task: dict[str, list[float | None]] = defaultdict(list)
    for run in runs:
        if is_scored(run) and run["id"] not in without:
            by_task[run["task__task_id"]].append(
                run["reward"] if run["status"] == Run.Status.COMPLETED else None
            )
    return by_task


def reward_by_basis(runs: list[dict[str, Any]]) -> tuple[dict[str, float], int, int]:
    """The mean of each reward component over the scored runs whose task's basis has it,
    with how many scored runs there were and how many had no breakdown.

    A run's components are its breakdown's; one without a breakdown (τ² gives none when
    it ended the run before scoring, e.g. at the step limit, or a counted failure)
    counts its reward — 0 then — on each component of its basis (``reward_basis``, else
    its task's other runs', else every component the evaluation shows).
    """
    scored = [r for r in runs if is_scored(r)]
    task_basis: dict[str, set[str]] = defaultdict(set)
    for run in scored:
        names = run["reward_info__reward_breakdown"] or {}
        task_basis[run["task__task_id"]].update(str(n) for n in names)
        task_basis[run["task__task_id"]].update(
            str(n) for n in run.get("reward_info__reward_basis") or ()
        )
    everything = set().union(*task_basis.values()) if task_basis else set()
    values: dict[str, list[float]] = defaultdict(list)
    without = 0
    for run in scored:
        breakdown = run["reward_info__reward_breakdown"]
        if breakdown:
            for name, value in breakdown.items():
                values[str(name)].append(float(value))
            continue
        without += 1
        reward = float(run["reward"] or 0.0) if run["status"] == Run.Status.COMPLETED else 0.0
        basis = {str(n) for n in run.get("reward_info__reward_basis") or ()}
        for name in basis or task_basis[run["task__task_id"]] or everything:
            values[name].append(reward)
    return {k: mean(v) for k, v in sorted(values.items())}, len(scored), without


def _eta_seconds(
    now: datetime, pace: float, lanes: int, started: list[datetime], waiting: int
) -> int:
    """Seconds until the last run ends at the runs' real pace (``pace``: their mean
    duration so far): each running run ends ``pace`` after it started (now, if it is
    already past that), and the ``waiting`` others follow on whichever of the ``lanes``
    frees first. It counts from ``now``, so the page can count it down (``eta_at``)."""
    ends = sorted(max(0.0, (s - now).total_seconds() + pace) for s in started)[:lanes]
    ends += [0.0] * (lanes - len(ends))
    heapq.heapify(ends)
    for _ in range(max(0, waiting)):
        heapq.heappush(ends, heapq.heappop(ends) + pace)
    return round(max(ends))


def evaluation_summary(
    evaluation: Evaluation, runs: list[dict[str, Any]] | None = None
) -> EvaluationSummary:
    """Progress, τ²'s metrics over the scored runs, and the means a person compares,
    computed now from ``runs`` (default: the evaluation's, read here).

    pass^k follows τ²: per task comb(c, k) / comb(n, k) over its scored trials, averaged
    over tasks, for k up to the fewest scored trials of any task.
    """
    runs = evaluation_runs(evaluation) if runs is None else runs
    statuses = Counter(r["status"] for r in runs)
    queued = statuses[Run.Status.QUEUED]
    scored = [r for r in runs if r["status"] == Run.Status.COMPLETED]
    metrics = compute_metrics(rewards_by_task(runs))
    if all("sim_error" in r for r in runs):
        sim_errors = {r["id"] for r in runs if r["sim_error"] and is_scored(r)}
    else:  # runs read without the flag
        sim_errors = sim_error_run_ids(evaluation_ids=[evaluation.pk])
        sim_errors &= {r["id"] for r in runs if is_scored(r)}
    clean = compute_metrics(rewards_by_task(runs, without=sim_errors))
    left_out = Counter(reason for reason in map(left_out_reason, runs) if reason)
    basis_means, basis_runs, basis_without = reward_by_basis(runs)
    durations = [
        (r["finished_at"] - r["started_at"]).total_seconds()
        for r in scored
        if r["finished_at"] and r["started_at"]
    ]
    costs = [r["cost_usd"] for r in runs if r["cost_usd"] is not None]
    user_costs = [r["user_cost_usd"] for r in runs if r["user_cost_usd"] is not None]
    judge_costs = [r["judge_cost_usd"] for r in runs if r["judge_cost_usd"] is not None]
    embedding_costs = [c for r in runs if (c := r.get("embedding_cost_usd")) is not None]
    totals = [t for t in map(_run_total_cost, runs) if t is not None]
    planned = evaluation.planned_runs or len(runs)
    final = sum(statuses[s] for s in Run.FINAL)
    # Running is what a worker has started (the matrix's hatched cells, the run's own
    # page); a run handed to the workers and waiting for one is still queued.
    running = statuses[Run.Status.RUNNING]
    eta = None
    now = timezone.now()
    if durations and final < planned and evaluation.status == Evaluation.Status.RUNNING:
        in_flight = running + sum(
            1 for r in runs if r["status"] == Run.Status.QUEUED and r["dispatched_at"]
        )
        lanes = max(1, min(evaluation.concurrency, in_flight))
        started = [
            r["started_at"] for r in runs if r["status"] == Run.Status.RUNNING and r["started_at"]
        ]
        eta = _eta_seconds(now, mean(durations), lanes, started, planned - final - len(started))
    by_task: dict[str, list[float]] = defaultdict(list)
    for run in scored:
        by_task[run["task__task_id"]].append(run["reward"] or 0.0)
    return EvaluationSummary(
        planned=planned,
        completed=statuses[Run.Status.COMPLETED],
        failed=statuses[Run.Status.FAILED],
        stopped=statuses[Run.Status.STOPPED],
        running=running,
        queued=queued,
        final=final,
        retryable=sum(
            1 for r in runs if r["status"] == Run.Status.FAILED and r["failure"] in Run.RETRYABLE
        ),
        eta_seconds=eta,
        avg_reward=metrics.avg_reward,
        pass_hat_ks=dict(metrics.pass_hat_ks),
        max_k=metrics.max_k,
        tasks_scored=metrics.tasks,
        successes=metrics.successes,
        reward_by_basis=basis_means,
        termination_reasons=dict(
            Counter(
                r["termination_reason"] or r["status"] for r in runs if r["status"] in Run.FINAL
            )
        ),
        mean_messages=mean(r["n_messages"] for r in scored) if scored else None,
        mean_tool_calls=mean(r["n_tool_calls"] for r in scored) if scored else None,
        mean_duration_s=mean(durations) if durations else None,
        # The agent's calls (τ²'s agent cost), the customer's, the judge's, every priced call.
        cost_usd=sum(costs, Decimal(0)) if costs else None,
        mean_cost_usd=sum(costs, Decimal(0)) / len(costs) if costs else None,
        user_cost_usd=sum(user_costs, Decimal(0)) if user_costs else None,
        judge_cost_usd=sum(judge_costs, Decimal(0)) if judge_costs else None,
        total_cost_usd=(
            sum(costs + user_costs + judge_costs + embedding_costs, Decimal(0))
            if costs or user_costs or judge_costs or embedding_costs
            else None
        ),
        unpriced_runs=sum(1 for r in runs if _has_calls(r)) - len(totals),
        mean_total_cost_usd=sum(totals, Decimal(0)) / len(totals) if totals else None,
        prompt_tokens=sum(r["prompt_tokens"] for r in runs),
        completion_tokens=sum(r["completion_tokens"] for r in runs),
        user_prompt_tokens=sum(r["user_prompt_tokens"] for r in runs),
        user_completion_tokens=sum(r["user_completion_tokens"] for r in runs),
        judge_prompt_tokens=sum(r["judge_prompt_tokens"] for r in runs),
        judge_completion_tokens=sum(r["judge_completion_tokens"] for r in runs),
        reward_by_task=tuple(
            sorted(
                (TaskReward(task_id=t, reward=mean(v), trials=len(v)) for t, v in by_task.items()),
                key=lambda row: (-row.reward, task_order(row.task_id)),
            )
        ),
        computed_at=now,
        scored_runs=metrics.runs,
        failures_counted=sum(1 for r in runs if is_scored(r) and r["status"] == Run.Status.FAILED),
        left_out={key: left_out[key] for key in LEFT_OUT if left_out[key]},
        basis_runs=basis_runs,
        basis_without_breakdown=basis_without,
        sim_error_runs=len(sim_errors),
        clean_pass_hat_ks=dict(clean.pass_hat_ks),
        clean_runs=clean.runs,
        clean_tasks=clean.tasks,
    )


def evaluation_metrics(evaluation: Evaluation, runs: list[dict[str, Any]] | None = None) -> dict:
    """:func:`evaluation_summary` as JSON (``EvaluationSummary.to_json``): what
    ``Evaluation.summary`` keeps, the API and the studio's download serve."""
    return evaluation_summary(evaluation, runs).to_json()


def evaluation_summary_stored(evaluation: Evaluation) -> EvaluationSummary | None:
    """What ``evaluation.summary`` says (the evaluation when it last ended: it is
    summarised when it completes, stops, fails or is imported), or ``None`` before that.

    A summary stored in a shape ``EvaluationSummary.from_json`` cannot read faithfully,
    or of version 2 (its pass^k left out the model's own failures, and it cannot say
    what it left out or how the simulator's errors weigh), is computed again from the
    runs (one query of them and one of their labels).
    """
    if not evaluation.summary:
        return None
    try:
        summary = EvaluationSummary.from_json(evaluation.summary)
    except SummaryUnreadable:
        return evaluation_summary(evaluation)
    return summary if summary.complete else evaluation_summary(evaluation)


def evaluation_matrix(evaluation: Evaluation, runs: list[dict[str, Any]]) -> list[dict]:
    """One row per task (in natural order of task ids): its cells per trial (run id,
    status, reward, success) and its pass^1 so far."""
    cells: dict[str, list[dict | None]] = {
        task_id: [None] * evaluation.num_trials for task_id in evaluation.task_ids
    }
    for run in runs:
        row = cells.get(run["task__task_id"])
        if row is None or run["trial"] is None or run["trial"] >= len(row):
            continue
        row[run["trial"]] = {
            "run_id": run["id"],
            "status": run["status"],
            "reward": run["reward"],
            "success": run["status"] == Run.Status.COMPLETED and is_successful(run["reward"]),
        }
    matrix = []
    for task_id, row in sorted(cells.items(), key=lambda item: task_order(item[0])):
        scored = [c for c in row if c and c["status"] == Run.Status.COMPLETED]
        matrix.append(
            {
                "task_id": task_id,
                "cells": row,
                "successes": sum(c["success"] for c in scored),
                "scored": len(scored),
            }
        )
    return matrix


# --- Downloads and comparison (views/results.py) ---------------------------------------

_EXPORT_COLUMNS = (*_RUN_COLUMNS, "seed", "error", "provenance__rescore")


def evaluation_export_runs(evaluation: Evaluation) -> list[dict[str, Any]]:
    """The evaluation's runs as narrow dicts for its downloads: ``evaluation_runs``'
    columns plus the seed, the error and, for an imported run, how τ²'s re-score
    compared with the file (``provenance__rescore``), by trial then task id in natural
    order ("2" before "13"). Never the messages."""
    rows = list(Run.objects.filter(evaluation=evaluation).values(*_EXPORT_COLUMNS))
    rows.sort(
        key=lambda r: (r["trial"] is None, r["trial"], task_order(r["task__task_id"]), r["id"])
    )
    return rows


@dataclass(frozen=True)
class TaskOutcome:
    """One task's scored trials in one evaluation: ``runs`` is (run id, success) by trial."""

    successes: int
    scored: int
    runs: tuple[tuple[int, bool], ...]

    @property
    def rate(self) -> float | None:
        return self.successes / self.scored if self.scored else None

    @property
    def passes_all(self) -> bool:
        return self.scored > 0 and self.successes == self.scored

    @property
    def fails_all(self) -> bool:
        return self.scored > 0 and self.successes == 0


def task_outcomes(
    evaluation: Evaluation, *, without: frozenset[int] | set[int] = frozenset()
) -> dict[str, TaskOutcome]:
    """Each task's successes over its scored runs (:func:`is_scored`: a counted failure
    is no success), in the evaluation's order, but for the runs in ``without``."""
    runs: dict[str, list[tuple[int, bool]]] = {task_id: [] for task_id in evaluation.task_ids}
    rows = (
        Run.objects.filter(evaluation=evaluation)
        .filter(
            Q(status=Run.Status.COMPLETED)
            | Q(status=Run.Status.FAILED, failure__in=COUNTED_FAILURES)
        )
        .order_by("trial", "id")
        .values_list("task__task_id", "id", "status", "reward")
    )
    for task_id, run_id, status, reward in rows:
        if run_id in without:
            continue
        ok = status == Run.Status.COMPLETED and is_successful(reward)
        runs.setdefault(task_id, []).append((run_id, ok))
    return {
        task_id: TaskOutcome(
            successes=sum(ok for _, ok in scored), scored=len(scored), runs=tuple(scored)
        )
        for task_id, scored in runs.items()
    }


COMPARE_SORTS = ("task", "a", "b", "delta", "flip")


def _pair(a: TaskOutcome | None, b: TaskOutcome | None) -> list[int]:
    """One run of each side to read side by side: where the outcomes differ, a pair
    that shows the difference; else each side's first trial."""
    if not (a and a.runs and b and b.runs):
        return []
    for run_a, ok_a in a.runs:
        for run_b, ok_b in b.runs:
            if ok_a != ok_b:
                return [run_a, run_b]
    return [a.runs[0][0], b.runs[0][0]]


def evaluation_compare(
    a: Evaluation, b: Evaluation, *, sort: str = "task", descending: bool = False
) -> list[dict[str, Any]]:
    """Per task, the two evaluations' pass rates side by side.

    ``flip`` is "a" when ``a`` passes every scored trial of the task and ``b`` none of
    its own, "b" the other way round, "" otherwise; ``delta`` is b's rate minus a's;
    ``runs`` is a pair of run ids for the runs' compare page (empty when a side has no
    scored run). ``sort`` is one of :data:`COMPARE_SORTS`; a row without the sorted
    value goes last.
    """
    outcomes_a, outcomes_b = task_outcomes(a), task_outcomes(b)
    rows = []
    for task_id in dict.fromkeys([*outcomes_a, *outcomes_b]):
        left, right = outcomes_a.get(task_id), outcomes_b.get(task_id)
        rate_a = left.rate if left else None
        rate_b = right.rate if right else None
        flip = ""
        if left and right and left.passes_all and right.fails_all:
            flip = "a"
        elif left and right and right.passes_all and left.fails_all:
            flip = "b"
        rows.append(
            {
                "task_id": task_id,
                "a": left,
                "b": right,
                "rate_a": rate_a,
                "rate_b": rate_b,
                "delta": rate_b - rate_a if rate_a is not None and rate_b is not None else None,
                "flip": flip,
                "runs": _pair(left, right),
            }
        )
    sort = sort if sort in COMPARE_SORTS else "task"
    if sort == "task":
        rows.sort(key=lambda row: task_order(row["task_id"]), reverse=descending)
        return rows
    field = {"a": "rate_a", "b": "rate_b", "delta": "delta", "flip": "flip"}[sort]
    present = [row for row in rows if row[field] not in (None, "")]
    missing = [row for row in rows if row[field] in (None, "")]
    present.sort(key=lambda row: (row[field], task_order(row["task_id"])), reverse=descending)
    return present + sorted(missing, key=lambda row: task_order(row["task_id"]))


# The trials planner reads the team's latest evaluations of a domain (enough to know its
# noise, few enough to stay one small query).
PLANNER_EVALUATIONS = 50


def trials_planner(*, domain: str, tasks: int, trials: int) -> Planner:
    """The expected 95% half-width of pass^1 with ``tasks`` × ``trials``, from the
    trial-to-trial variance of success in the team's latest ``PLANNER_EVALUATIONS``
    evaluations of ``domain`` (each task's scored trials in one evaluation, two or more),
    else :data:`~apps.evaluations.significance.DEFAULT_TRIAL_VARIANCE` — also when those
    trials never differed (a variance of 0, e.g. one evaluation that failed every run),
    which is no evidence of precision: the planner then says what it needs instead."""
    recent = list(
        Evaluation.objects.filter(domain=domain, num_trials__gte=2)
        .order_by("-created_at", "-id")
        .values_list("id", flat=True)[:PLANNER_EVALUATIONS]
    )
    groups: dict[tuple[int, str], list[bool]] = defaultdict(list)
    rows = (
        Run.objects.filter(evaluation_id__in=recent)
        .filter(
            Q(status=Run.Status.COMPLETED)
            | Q(status=Run.Status.FAILED, failure__in=COUNTED_FAILURES)
        )
        .values_list("evaluation_id", "task__task_id", "status", "reward")
    )
    for evaluation_id, task_id, status, reward in rows.iterator(chunk_size=5000):
        groups[(evaluation_id, task_id)].append(
            status == Run.Status.COMPLETED and is_successful(reward)
        )
    observed = trial_variance(list(groups.values()))
    evaluations = len({e for (e, _), runs in groups.items() if len(runs) >= 2})
    if observed is None:
        return Planner(tasks=tasks, trials=trials, variance=DEFAULT_TRIAL_VARIANCE, observed=0)
    variance, used = observed
    if variance <= 0:  # trials that never differed: no evidence of precision
        return Planner(
            tasks=tasks,
            trials=trials,
            variance=DEFAULT_TRIAL_VARIANCE,
            observed=0,
            evaluations=evaluations,
            unvaried=used,
        )
    return Planner(
        tasks=tasks, trials=trials, variance=variance, observed=used, evaluations=evaluations
    )


@dataclass(frozen=True)
class CompareSignificance:
    """B − A of pass^k, for each k both have, over every scored run and without the runs
    with a critical user-simulator error (each side's count of those), and what differs
    between the two evaluations' settings (empty: they may be compared as they are)."""

    differences: tuple[Difference, ...]
    clean_differences: tuple[Difference, ...]
    sim_errors: tuple[int, int]
    differs: tuple[str, ...]

    @property
    def sentences(self) -> list[tuple[int, str, str]]:
        """(k, over every scored run, without simulator errors) in words, by k."""
        clean = {d.k: d.sentence for d in self.clean_differences}
        return [(d.k, d.sentence, clean.get(d.k, "")) for d in self.differences]


def _rewards(outcomes: dict[str, TaskOutcome]) -> dict[str, list[float]]:
    return {
        task_id: [1.0 if ok else 0.0 for _, ok in outcome.runs]
        for task_id, outcome in outcomes.items()
        if outcome.scored
    }


def _differences(a: dict[str, list[float]], b: dict[str, list[float]]) -> tuple[Difference, ...]:
    if not a or not b:
        return ()
    top = min(min(map(len, a.values())), min(map(len, b.values())))
    found = (paired_difference(a, b, k=k) for k in range(1, top + 1))
    return tuple(d for d in found if d is not None)


def evaluation_compare_significance(a: Evaluation, b: Evaluation) -> CompareSignificance:
    """How sure the difference between ``a`` and ``b`` is: a paired bootstrap over the
    tasks both scored (``significance.paired_difference``), for k = 1 … the fewest
    scored trials of a task on either side."""
    errors = sim_error_run_ids(evaluation_ids=[a.pk, b.pk])
    left, right = task_outcomes(a), task_outcomes(b)
    clean_left, clean_right = task_outcomes(a, without=errors), task_outcomes(b, without=errors)
    ids = (
        {r for o in left.values() for r, _ in o.runs},
        {r for o in right.values() for r, _ in o.runs},
    )
    return CompareSignificance(
        differences=_differences(_rewards(left), _rewards(right)),
        clean_differences=_differences(_rewards(clean_left), _rewards(clean_right)),
        sim_errors=(len(errors & ids[0]), len(errors & ids[1])),
        differs=tuple(differences(identity_of(b), identity_of(a))),
    )


def evaluation_list_rows(evaluations) -> list[dict[str, Any]]:
    """The history's rows: each evaluation with its runs counted by status (one query for
    the page) and what its summary says (pass^k, average reward, cost)."""
    evaluations = list(evaluations)
    counts: dict[int, Counter] = defaultdict(Counter)
    rows = (
        Run.objects.filter(evaluation_id__in=[e.pk for e in evaluations])
        .values_list("evaluation_id", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    for evaluation_id, status, n in rows:
        counts[evaluation_id][status] = n
    out = []
    for evaluation in evaluations:
        by_status = counts[evaluation.pk]
        summary = evaluation_summary_stored(evaluation)
        report = (evaluation.provenance or {}).get("import") or {}
        out.append(
            {
                "evaluation": evaluation,
                "runs": sum(by_status.values()),
                "final": sum(by_status[s] for s in Run.FINAL),
                "completed": by_status[Run.Status.COMPLETED],
                "failed": by_status[Run.Status.FAILED],
                "pass_1": summary.pass_hat(1) if summary else None,
                "pass_k": summary.pass_max_k if summary else None,
                "max_k": summary.max_k if summary else None,
                "avg_reward": summary.avg_reward if summary else None,
                "cost_usd": summary.total_cost_usd if summary else None,  # every priced call
                "differs": len(report.get("differs") or []),
                "not_rescored": len(report.get("not_rescored") or []),
            }
        )
    return out


# --- jobs (imports and submission checks on the workers) ------------------------------


def evaluation_job_for(*, user, pk: int) -> EvaluationJob:
    """Job ``pk`` if ``user`` asked for it (404 otherwise: another's job is not there for
    them); without its uploaded file."""
    job = (
        EvaluationJob.objects.defer("upload")
        .select_related("evaluation")
        .filter(pk=pk, created_by_id=getattr(user, "pk", None) or 0)
        .first()
    )
    if job is None:
        raise Http404("No such job of yours")
    return job


def evaluation_jobs_in_flight(*, user) -> list[EvaluationJob]:
    """``user``'s jobs waiting or running, oldest first, without their files."""
    if not getattr(user, "is_authenticated", False):
        return []
    return list(
        EvaluationJob.objects.defer("upload")
        .filter(
            created_by=user,
            status__in=(EvaluationJob.Status.QUEUED, EvaluationJob.Status.RUNNING),
        )
        .order_by("created_at", "id")
    )

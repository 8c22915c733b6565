"""Reads of evaluations: the list, one evaluation, its progress, matrix and τ²'s metrics."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal
from statistics import mean
from typing import Any

from django.db.models import Count, QuerySet
from django.http import Http404
from django.utils import timezone

from apps.evaluations.models import Evaluation
from apps.evaluations.summary import EvaluationSummary, SummaryUnreadable, TaskReward
from apps.runs.models import Run
from tau2_env.evaluation import compute_metrics, is_successful

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
    "started_at",
    "finished_at",
    "dispatched_at",
    "reward_info__reward_breakdown",
)


def _has_calls(run: dict[str, Any]) -> bool:
    return bool(
        run["prompt_tokens"]
        or run["completion_tokens"]
        or run["user_prompt_tokens"]
        or run["user_completion_tokens"]
    )


def _run_total_cost(run: dict[str, Any]) -> Decimal | None:
    """A run's agent and customer cost together; ``None`` when it made no calls or a role
    that made calls has no price (unknown, never counted as $0)."""
    parts = (
        (run["prompt_tokens"] + run["completion_tokens"], run["cost_usd"]),
        (run["user_prompt_tokens"] + run["user_completion_tokens"], run["user_cost_usd"]),
    )
    used = [cost for tokens, cost in parts if tokens]
    if not used or any(cost is None for cost in used):
        return None
    return sum(used, Decimal(0))


def evaluation_get(*, pk: int) -> Evaluation:
    try:
        return Evaluation.objects.select_related("created_by").get(pk=pk)
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
    """The evaluation's runs as narrow dicts (see ``_RUN_COLUMNS``)."""
    return list(
        Run.objects.filter(evaluation=evaluation).order_by("trial", "id").values(*_RUN_COLUMNS)
    )


def rewards_by_task(runs: list[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Each task's rewards of its scored (completed) runs: what τ²'s metrics read."""
    by_task: dict[str, list[float | None]] = defaultdict(list)
    for run in runs:
        if run["status"] == Run.Status.COMPLETED:
            by_task[run["task__task_id"]].append(run["reward"])
    return by_task


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
    durations = [
        (r["finished_at"] - r["started_at"]).total_seconds()
        for r in scored
        if r["finished_at"] and r["started_at"]
    ]
    costs = [r["cost_usd"] for r in runs if r["cost_usd"] is not None]
    user_costs = [r["user_cost_usd"] for r in runs if r["user_cost_usd"] is not None]
    totals = [t for t in map(_run_total_cost, runs) if t is not None]
    basis: dict[str, list[float]] = defaultdict(list)
    for run in scored:
        for component, value in (run["reward_info__reward_breakdown"] or {}).items():
            basis[str(component)].append(float(value))
    planned = evaluation.planned_runs or len(runs)
    final = sum(statuses[s] for s in Run.FINAL)
    running = statuses[Run.Status.RUNNING] + sum(
        1 for r in runs if r["status"] == Run.Status.QUEUED and r["dispatched_at"]
    )
    eta = None
    if durations and final < planned and evaluation.status == Evaluation.Status.RUNNING:
        lanes = max(1, min(evaluation.concurrency, max(running, 1)))
        eta = round((planned - final) * mean(durations) / lanes)
    by_task: dict[str, list[float]] = defaultdict(list)
    for run in scored:
        by_task[run["task__task_id"]].append(run["reward"] or 0.0)
    return EvaluationSummary(
        planned=planned,
        completed=statuses[Run.Status.COMPLETED],
        failed=statuses[Run.Status.FAILED],
        stopped=statuses[Run.Status.STOPPED],
        running=running,
        queued=queued - (running - statuses[Run.Status.RUNNING]),
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
        reward_by_basis={k: mean(v) for k, v in sorted(basis.items())},
        termination_reasons=dict(
            Counter(
                r["termination_reason"] or r["status"] for r in runs if r["status"] in Run.FINAL
            )
        ),
        mean_messages=mean(r["n_messages"] for r in scored) if scored else None,
        mean_tool_calls=mean(r["n_tool_calls"] for r in scored) if scored else None,
        mean_duration_s=mean(durations) if durations else None,
        # The agent's calls (τ²'s agent cost), the customer's, and every priced call.
        cost_usd=sum(costs, Decimal(0)) if costs else None,
        mean_cost_usd=sum(costs, Decimal(0)) / len(costs) if costs else None,
        user_cost_usd=sum(user_costs, Decimal(0)) if user_costs else None,
        total_cost_usd=sum(costs + user_costs, Decimal(0)) if costs or user_costs else None,
        unpriced_runs=sum(1 for r in runs if _has_calls(r)) - len(totals),
        mean_total_cost_usd=sum(totals, Decimal(0)) / len(totals) if totals else None,
        prompt_tokens=sum(r["prompt_tokens"] for r in runs),
        completion_tokens=sum(r["completion_tokens"] for r in runs),
        user_prompt_tokens=sum(r["user_prompt_tokens"] for r in runs),
        user_completion_tokens=sum(r["user_completion_tokens"] for r in runs),
        reward_by_task=tuple(
            sorted(
                (TaskReward(task_id=t, reward=mean(v), trials=len(v)) for t, v in by_task.items()),
                key=lambda row: (-row.reward, row.task_id),
            )
        ),
        computed_at=timezone.now(),
    )


def evaluation_metrics(evaluation: Evaluation, runs: list[dict[str, Any]] | None = None) -> dict:
    """:func:`evaluation_summary` as JSON (``EvaluationSummary.to_json``): what
    ``Evaluation.summary`` keeps, the API and the studio's download serve."""
    return evaluation_summary(evaluation, runs).to_json()


def evaluation_summary_stored(evaluation: Evaluation) -> EvaluationSummary | None:
    """What ``evaluation.summary`` says (the evaluation when it last ended: it is
    summarised when it completes, stops, fails or is imported), or ``None`` before that.

    A summary stored in a shape ``EvaluationSummary.from_json`` cannot read faithfully
    is computed again from the runs (one query of them).
    """
    if not evaluation.summary:
        return None
    try:
        return EvaluationSummary.from_json(evaluation.summary)
    except SummaryUnreadable:
        return evaluation_summary(evaluation)


def evaluation_matrix(evaluation: Evaluation, runs: list[dict[str, Any]]) -> list[dict]:
    """One row per task (in the evaluation's order): its cells per trial (run id,
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
    for task_id, row in cells.items():
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
    compared with the file (``provenance__rescore``). Never the messages."""
    return list(
        Run.objects.filter(evaluation=evaluation)
        .order_by("trial", "task__task_id", "id")
        .values(*_EXPORT_COLUMNS)
    )


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


def task_outcomes(evaluation: Evaluation) -> dict[str, TaskOutcome]:
    """Each task's successes over its scored (completed) runs, in the evaluation's order."""
    runs: dict[str, list[tuple[int, bool]]] = {task_id: [] for task_id in evaluation.task_ids}
    rows = (
        Run.objects.filter(evaluation=evaluation, status=Run.Status.COMPLETED)
        .order_by("trial", "id")
        .values_list("task__task_id", "id", "reward")
    )
    for task_id, run_id, reward in rows:
        runs.setdefault(task_id, []).append((run_id, is_successful(reward)))
    return {
        task_id: TaskOutcome(
            successes=sum(ok for _, ok in scored), scored=len(scored), runs=tuple(scored)
        )
        for task_id, scored in runs.items()
    }


COMPARE_SORTS = ("task", "a", "b", "delta", "flip")


def _task_order(task_id: str) -> tuple:
    """Numeric task ids in numeric order ("2" before "10"), the others after, by text."""
    return (0, int(task_id), "") if task_id.isdigit() else (1, 0, task_id)


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
        rows.sort(key=lambda row: _task_order(row["task_id"]), reverse=descending)
        return rows
    field = {"a": "rate_a", "b": "rate_b", "delta": "delta", "flip": "flip"}[sort]
    present = [row for row in rows if row[field] not in (None, "")]
    missing = [row for row in rows if row[field] in (None, "")]
    present.sort(key=lambda row: (row[field], _task_order(row["task_id"])), reverse=descending)
    return present + sorted(missing, key=lambda row: _task_order(row["task_id"]))


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

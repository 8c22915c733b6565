"""What the live evaluation page shows: one state, for the page, ``/state/`` and the socket.

The matrix and the charts travel as compact JSON the page script draws (a 2,285-task
telecom evaluation has ~9,000 cells: no template loop over them); progress and metrics
as small HTML fragments.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.template.loader import render_to_string

from apps.evaluations import selectors
from apps.evaluations.models import Evaluation
from apps.runs.models import Run

# A cell of the matrix: [run id, status letter, reward or null] (null: no run).
STATUS_LETTERS = {
    Run.Status.QUEUED: "q",
    Run.Status.RUNNING: "r",
    Run.Status.COMPLETED: "c",
    Run.Status.FAILED: "f",
    Run.Status.STOPPED: "s",
}


def evaluation_state(evaluation: Evaluation) -> dict[str, Any]:
    """The whole live state of ``evaluation``, JSON-ready.

    ``version`` is the number of its final runs, what ``events.evaluation_version``
    counts, read from the same rows as everything else here.
    """
    runs = selectors.evaluation_runs(evaluation)
    metrics = selectors.evaluation_metrics(evaluation, runs)
    matrix = matrix_payload(evaluation, runs)
    return {
        "type": "state",
        "evaluation_id": evaluation.pk,
        "version": metrics["final"],
        "status": evaluation.status,
        "final": evaluation.is_final,
        "retryable": metrics["retryable"],
        "progress_html": render_to_string(
            "includes/evaluation_progress.html", progress_context(evaluation, metrics)
        ),
        "metrics_html": render_to_string(
            "includes/evaluation_metrics.html", metrics_context(evaluation, metrics)
        ),
        "matrix": matrix,
        "charts": charts_payload(evaluation, metrics, matrix["tasks"]),
    }


def matrix_payload(evaluation: Evaluation, runs: list[dict]) -> dict[str, Any]:
    """``{"k": trials, "tasks": [task id…], "cells": [cell…]}``, cells row by row (task
    ``i``'s trial ``t`` at ``i * k + t``)."""
    tasks, cells = [], []
    for row in selectors.evaluation_matrix(evaluation, runs):
        tasks.append(row["task_id"])
        cells.extend(
            [c["run_id"], STATUS_LETTERS.get(c["status"], "q"), c["reward"]] if c else None
            for c in row["cells"]
        )
    return {"k": evaluation.num_trials, "tasks": tasks, "cells": cells}


def charts_payload(evaluation: Evaluation, metrics: dict, tasks: list[str]) -> dict[str, Any]:
    """The pass^k curve (``[[k, pass^k]…]``) and each scored task's mean reward, best
    first (``[[task index, reward]…]``, indices into ``tasks``)."""
    index = {task_id: i for i, task_id in enumerate(tasks)}
    return {
        "k": evaluation.num_trials,
        "pass_hat_k": [[int(k), v] for k, v in sorted(metrics["pass_hat_ks"].items(), key=_k)],
        "reward_by_task": [
            [index[row["task_id"]], round(row["reward"], 4)]
            for row in metrics["reward_by_task"]
            if row["task_id"] in index
        ],
    }


def _k(item) -> int:
    return int(item[0])


def progress_context(evaluation: Evaluation, metrics: dict) -> dict[str, Any]:
    planned = metrics["planned"] or 1
    segments = [
        ("completed", "done", metrics["completed"]),
        ("failed", "failed", metrics["failed"]),
        ("stopped", "stopped", metrics["stopped"]),
        ("running", "running", metrics["running"]),
        ("queued", "queued", metrics["queued"]),
    ]
    return {
        "evaluation": evaluation,
        "m": metrics,
        "segments": [
            {"key": key, "label": label, "count": count, "percent": round(100 * count / planned, 3)}
            for key, label, count in segments
            if count or key in ("completed", "running", "queued", "failed")
        ],
        "eta": duration_label(metrics["eta_seconds"]),
        "cost": _money(metrics["cost_usd"]),
        "tokens": metrics["prompt_tokens"] + metrics["completion_tokens"],
    }


def metrics_context(evaluation: Evaluation, metrics: dict) -> dict[str, Any]:
    return {
        "evaluation": evaluation,
        "m": metrics,
        "pass_hat_ks": [
            {"k": int(k), "value": v} for k, v in sorted(metrics["pass_hat_ks"].items(), key=_k)
        ],
        "terminations": sorted(
            metrics["termination_reasons"].items(), key=lambda item: (-item[1], item[0])
        ),
        "mean_duration": duration_label(metrics["mean_duration_s"]),
        "mean_cost": _money(metrics["mean_cost_usd"]),
    }


def duration_label(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``; ``""`` when unknown."""
    if seconds is None:
        return ""
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"


def _money(value: str | None) -> str:
    """``$1.2346`` (4 decimals, a run costs fractions of a cent), or ``""`` when unpriced."""
    if value is None:
        return ""
    return f"${Decimal(value):.4f}"

"""What the live evaluation page shows: one state, for the page, ``/state/`` and the socket.

The matrix and the charts travel as compact JSON the page script draws (a 2,285-task
telecom evaluation has ~9,000 cells: no template loop over them); progress and metrics
as small HTML fragments.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.core.cache import cache
from django.db.models import Count, F, Max, Q, Sum
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from apps.evaluations import selectors
from apps.evaluations.estimates import dollars
from apps.evaluations.models import Evaluation
from apps.evaluations.summary import EvaluationSummary
from apps.runs.models import Run

# A cell of the matrix: [run id, status letter, reward or null] (null: no run).
STATUS_LETTERS = {
    Run.Status.QUEUED: "q",
    Run.Status.RUNNING: "r",
    Run.Status.COMPLETED: "c",
    Run.Status.FAILED: "f",
    Run.Status.STOPPED: "s",
}


# The state of an evaluation is computed once per change and kept here, whoever asks
# (the page, /state/, each viewer's socket): reading a 2,285-task × 4 evaluation's runs
# and τ²'s metrics takes ~200 ms, the check whether anything changed one query.
STATE_CACHE_SECONDS = 600
_JSON_SCRIPT_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


@dataclass(frozen=True)
class LiveState:
    """``head``: the small fields and the progress and metrics fragments; ``data_json``:
    the matrix and the charts as one JSON text.

    ``version`` in ``head`` is the number of final runs (what
    ``events.evaluation_version`` counts), read from the same rows as the rest.
    """

    head: dict[str, Any]
    data_json: str

    def message(self) -> dict[str, Any]:
        """What the socket and ``/state/`` send: the head, ``matrix`` and ``charts``."""
        return {**self.head, **json.loads(self.data_json)}

    @property
    def data_script(self) -> str:
        """``data_json`` safe inside ``<script type="application/json">`` (as
        ``json_script`` escapes it), without serialising it again."""
        return mark_safe(self.data_json.translate(_JSON_SCRIPT_ESCAPES))  # noqa: S308


def evaluation_state(evaluation: Evaluation) -> LiveState:
    """The live state of ``evaluation``: the kept one if nothing changed since, else
    computed afresh (and kept)."""
    key = f"evaluation-state:{evaluation.pk}"
    stamp = _stamp(evaluation)
    kept = cache.get(key)
    if kept is not None and kept[0] == stamp:
        return LiveState(head=kept[1], data_json=kept[2])
    state = _compute(evaluation)
    cache.set(key, (stamp, state.head, state.data_json), STATE_CACHE_SECONDS)
    return state


def _stamp(evaluation: Evaluation) -> tuple:
    """What the state is made of, summed up in one query: the evaluation's status and
    error, and its runs' counts per status, last start / finish / dispatch, tokens,
    rewards and messages. Any change the page shows changes one of them."""
    totals = Run.objects.filter(evaluation_id=evaluation.pk).aggregate(
        **{status: Count("id", filter=Q(status=status)) for status in Run.Status.values},
        dispatched=Count("dispatched_at"),
        last_started=Max("started_at"),
        last_finished=Max("finished_at"),
        last_dispatched=Max("dispatched_at"),
        tokens=Sum(F("prompt_tokens") + F("completion_tokens")),
        rewards=Sum("reward"),
        messages=Sum("n_messages"),
    )
    return (evaluation.status, evaluation.error, tuple(sorted(totals.items())))


def _compute(evaluation: Evaluation) -> LiveState:
    runs = selectors.evaluation_runs(evaluation)
    summary = selectors.evaluation_summary(evaluation, runs)
    matrix = matrix_payload(evaluation, runs)
    head = {
        "type": "state",
        "evaluation_id": evaluation.pk,
        "version": summary.final,
        "status": evaluation.status,
        "final": evaluation.is_final,
        "retryable": summary.retryable,
        "progress_html": render_to_string(
            "includes/evaluation_progress.html", progress_context(evaluation, summary)
        ),
        "metrics_html": render_to_string(
            "includes/evaluation_metrics.html", metrics_context(evaluation, summary)
        ),
    }
    data = {"matrix": matrix, "charts": charts_payload(evaluation, summary, matrix["tasks"])}
    return LiveState(head=head, data_json=json.dumps(data, separators=(",", ":")))


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


def charts_payload(
    evaluation: Evaluation, summary: EvaluationSummary, tasks: list[str]
) -> dict[str, Any]:
    """The pass^k curve (``[[k, pass^k]…]``) and each scored task's mean reward, best
    first (``[[task index, reward]…]``, indices into ``tasks``)."""
    index = {task_id: i for i, task_id in enumerate(tasks)}
    return {
        "k": evaluation.num_trials,
        "pass_hat_k": [[k, v] for k, v in sorted(summary.pass_hat_ks.items())],
        "reward_by_task": [
            [index[row.task_id], round(row.reward, 4)]
            for row in summary.reward_by_task
            if row.task_id in index
        ],
    }


def progress_context(evaluation: Evaluation, summary: EvaluationSummary) -> dict[str, Any]:
    planned = summary.planned or 1
    segments = [
        ("completed", "done", summary.completed),
        ("failed", "failed", summary.failed),
        ("stopped", "stopped", summary.stopped),
        ("running", "running", summary.running),
        ("queued", "queued", summary.queued),
    ]
    return {
        "evaluation": evaluation,
        "m": summary,
        "segments": [
            {"key": key, "label": label, "count": count, "percent": round(100 * count / planned, 3)}
            for key, label, count in segments
            if count or key in ("completed", "running", "queued", "failed")
        ],
        "eta": duration_label(summary.eta_seconds),
        "cost": _money(summary.total_cost_usd),  # every priced call, agent and customer
        "agent_cost": _money(summary.cost_usd),
        "customer_cost": _money(summary.user_cost_usd),
        "unpriced_runs": summary.unpriced_runs,
        "tokens": summary.tokens,
    }


def metrics_context(evaluation: Evaluation, summary: EvaluationSummary) -> dict[str, Any]:
    return {
        "evaluation": evaluation,
        "m": summary,
        "pass_hat_ks": [{"k": k, "value": v} for k, v in sorted(summary.pass_hat_ks.items())],
        "terminations": sorted(
            summary.termination_reasons.items(), key=lambda item: (-item[1], item[0])
        ),
        "mean_duration": duration_label(summary.mean_duration_s),
        "mean_cost": _money(summary.mean_total_cost_usd),
        "mean_agent_cost": _money(summary.mean_cost_usd),
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


def _money(value: Decimal | None) -> str:
    """``$1.23``, ``$0.00042`` (a run may cost a fraction of a cent: never shown as $0),
    or ``""`` when unpriced."""
    if value is None:
        return ""
    return dollars(value)

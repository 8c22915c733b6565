"""An evaluation as downloads: the studio's own JSON, τ²-bench's results format, a CSV.

Nothing here ever writes a key or a token: models are named as τ² names them with the
τ² llm_args each side ran with (chosen and checked without keys or endpoints), and
provenance goes out through :func:`scrub`.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from django.db.models import Q
from django.urls import reverse

from apps.evaluations import selectors
from apps.evaluations.models import Evaluation
from apps.runs.exports import tau2_info, tau2_simulation, tau2_tasks
from apps.runs.models import Run, RunEvent
from apps.runs.spec import RunSpec
from tau2_env.engine.episodes import IMPLEMENTATIONS

EXPORT_VERSION = 1

# Names a secret or an endpoint goes by (api_key, hf_token, base_url…): a value under
# such a name never leaves the server.
_SECRET_NAME = re.compile(
    r"(^|_)(key|token|secret|password|authorization|api_base|base_url|headers)$", re.IGNORECASE
)


def scrub(value: Any) -> Any:
    """``value`` without any entry whose name says it holds a secret or an endpoint."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not _SECRET_NAME.search(str(k))}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def _duration(run: dict[str, Any]) -> float | None:
    if run["finished_at"] and run["started_at"]:
        return round((run["finished_at"] - run["started_at"]).total_seconds(), 3)
    return None


def _run_row(run: dict[str, Any], url: Callable[[str], str]) -> dict[str, Any]:
    rescore = run.get("provenance__rescore") or None
    return {
        "id": run["id"],
        "url": url(reverse("runs:detail", kwargs={"pk": run["id"]})),
        "task_id": run["task__task_id"],
        "trial": run["trial"],
        "seed": run["seed"],
        "status": run["status"],
        "failure": run["failure"] or None,
        "error": run["error"] or None,
        "reward": run["reward"],
        "termination_reason": run["termination_reason"] or None,
        "messages": run["n_messages"],
        "tool_calls": run["n_tool_calls"],
        "prompt_tokens": run["prompt_tokens"],
        "completion_tokens": run["completion_tokens"],
        "cost_usd": str(run["cost_usd"]) if run["cost_usd"] is not None else None,
        "duration_s": _duration(run),
        "rescore": rescore,
    }


def evaluation_export(evaluation: Evaluation, *, url: Callable[[str], str] = str) -> dict:
    """The studio's own JSON of an evaluation: its settings, τ²'s metrics and one line
    per run (ids, rewards, usage; never the messages). ``url`` makes paths absolute."""
    runs = selectors.evaluation_export_runs(evaluation)
    return {
        "format": "tau2-studio.evaluation",
        "version": EXPORT_VERSION,
        "id": evaluation.pk,
        "name": str(evaluation),
        "url": url(evaluation.get_absolute_url()),
        "status": evaluation.status,
        "error": evaluation.error or None,
        "started_by": evaluation.created_by.get_username(),
        "created_at": _iso(evaluation.created_at),
        "finished_at": _iso(evaluation.finished_at),
        "domain": evaluation.domain,
        "split": evaluation.split or None,
        "full_split": evaluation.full_split,
        "query": evaluation.query or None,
        "task_ids": evaluation.task_ids,
        "agent_model": evaluation.agent_model,
        "user_model": evaluation.user_model,
        # τ²'s ablation (Run.Mode) and the agent and user it ran with, as tau2 run names them.
        "mode": evaluation.mode,
        # A knowledge domain's retrieval configuration (tau2 run --retrieval-config).
        "retrieval_config": evaluation.retrieval_config or None,
        # What embedded for it (an embedding configuration's), on which connection.
        "embedding_model": evaluation.embedding_model or None,
        "embedding_connection": _connection_name(evaluation.embedding_connection),
        "implementations": dict(
            zip(("agent", "user"), IMPLEMENTATIONS[evaluation.mode], strict=True)
        ),
        # Where each side ran (a connection by name, never its key) and τ²'s llm_args.
        "agent_connection": _connection_name(evaluation.agent_connection),
        "user_connection": _connection_name(evaluation.user_connection),
        "agent_llm_args": agent_llm_args(evaluation),
        "user_llm_args": user_llm_args(evaluation),
        "num_trials": evaluation.num_trials,
        "seed": evaluation.seed,
        "trial_seeds": evaluation.trial_seeds,
        "max_steps": evaluation.max_steps,
        "max_errors": evaluation.max_errors,
        "timeout": evaluation.timeout,
        "concurrency": evaluation.concurrency,
        "provenance": scrub(evaluation.provenance),
        "metrics": selectors.evaluation_metrics(evaluation, runs),
        "runs": [_run_row(run, url) for run in runs],
    }


def _connection_name(connection) -> str | None:
    return connection.name if connection is not None else None


def public_spec(evaluation: Evaluation) -> RunSpec:
    """The evaluation's spec as it may leave the server: each side's τ² llm_args (τ²'s
    default on rows from before they could be chosen) never hold a key or an endpoint
    (an imported file's are scrubbed again)."""
    spec = evaluation.spec
    return replace(
        spec,
        agent=replace(spec.agent, llm_args=scrub(dict(spec.agent.llm_args or {}))),
        customer=replace(spec.customer, llm_args=scrub(dict(spec.customer.llm_args or {}))),
    )


def agent_llm_args(evaluation: Evaluation) -> dict[str, Any]:
    """The agent's τ² llm_args, as :func:`public_spec` has them."""
    return dict(public_spec(evaluation).agent.llm_args or {})


def user_llm_args(evaluation: Evaluation) -> dict[str, Any]:
    """The customer's τ² llm_args, as :func:`public_spec` has them."""
    return dict(public_spec(evaluation).customer.llm_args or {})


def _messages_by_run(run_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    messages: dict[int, list[dict[str, Any]]] = defaultdict(list)
    rows = (
        RunEvent.objects.filter(run_id__in=run_ids)
        .order_by("run_id", "seq")
        .values_list("run_id", "message")
    )
    for run_id, message in rows.iterator(chunk_size=2000):
        messages[run_id].append(message)
    return messages


def _simulation(run: Run, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A run as τ²'s simulation; a failed conversation scores 0, as τ² scores one that
    ended on the model's own error, and says why in its ``info``."""
    simulation = tau2_simulation(run, messages)
    if run.status == Run.Status.FAILED:
        simulation["reward_info"] = {"reward": 0.0, "info": {"failed": run.error[:500]}}
    return simulation


def evaluation_export_tau2(evaluation: Evaluation) -> dict[str, Any]:
    """The evaluation as one τ²-bench ``Results`` file, as ``tau2 run`` writes one.

    ``info.num_trials`` is k and ``info.seed`` the evaluation's seed; one simulation per
    run τ²'s metrics count (``selectors.is_scored``): every completed run, and every run
    the model's own conversation failed, as τ² records such a simulation — its messages,
    how it ended and reward 0 — with its trial and the seed its orchestrator got, so τ²'s
    ``compute_metrics`` reads the same runs as our pass^k. ``tasks`` are τ²'s own
    definitions of the evaluation's tasks.
    """
    runs = list(
        Run.objects.filter(evaluation=evaluation)
        .filter(
            Q(status=Run.Status.COMPLETED)
            | Q(status=Run.Status.FAILED, failure__in=selectors.COUNTED_FAILURES)
        )
        .select_related("task")
        .order_by("trial", "id")
    )
    messages = _messages_by_run([run.pk for run in runs])
    imported = evaluation.status == Evaluation.Status.IMPORTED
    info = tau2_info(
        spec=public_spec(evaluation),
        domain=evaluation.domain,
        num_trials=evaluation.num_trials,
        tau2_version=(evaluation.provenance or {}).get("tau2_version", ""),
        studio={
            "evaluation_id": evaluation.pk,
            "source": "tau2 run import" if imported else "studio",
            "mode": evaluation.mode,
        },
    )
    # The mode's agent and user, as `tau2 run --agent … --user …` writes them.
    agent, user = IMPLEMENTATIONS[evaluation.mode]
    info["agent_info"]["implementation"] = agent
    info["user_info"]["implementation"] = user
    return {
        "timestamp": _iso(evaluation.finished_at or evaluation.created_at),
        "info": info,
        "tasks": tau2_tasks(evaluation.domain, evaluation.task_ids),
        "simulations": [_simulation(run, messages.get(run.pk, [])) for run in runs],
    }


CSV_COLUMNS = (
    "run_id",
    "task_id",
    "trial",
    "seed",
    "status",
    "reward",
    "termination_reason",
    "messages",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "duration_s",
    "error",
    "rescore",
    "run_url",
)


def _cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula is written as text."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return "" if value is None else value


def evaluation_csv_lines(evaluation: Evaluation, *, url: Callable[[str], str] = str) -> Iterator:
    """The evaluation's CSV, one line at a time: a header, then one row per run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values) -> str:
        writer.writerow([_cell(v) for v in values])
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate(0)
        return text

    yield line(CSV_COLUMNS)
    for run in selectors.evaluation_export_runs(evaluation):
        row = _run_row(run, url)
        rescore = row["rescore"] or {}
        yield line(
            [
                row["id"],
                row["task_id"],
                row["trial"],
                row["seed"],
                row["status"],
                row["reward"],
                row["termination_reason"],
                row["messages"],
                row["tool_calls"],
                row["prompt_tokens"],
                row["completion_tokens"],
                row["cost_usd"],
                row["duration_s"],
                row["error"],
                rescore.get("status"),
                row["url"],
            ]
        )

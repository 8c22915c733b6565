"""A run as JSON: the studio's own trace, τ²-bench's results format, and compare columns."""

from __future__ import annotations

from typing import Any

from apps.runs import presenters
from apps.runs.models import Run

EXPORT_VERSION = 1


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def run_export(run: Run) -> dict[str, Any]:
    """Everything about a run that can leave the server — never a token or key."""
    return {
        "format": "tau2-studio.run",
        "version": EXPORT_VERSION,
        "id": run.pk,
        "kind": run.kind,
        "status": run.status,
        "domain": run.domain,
        "task_id": run.task.task_id,
        "started_by": run.created_by.get_username(),
        "agent_model": run.agent_model,
        "user_model": run.user_model,
        "max_steps": run.max_steps,
        "seed": run.seed,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "termination_reason": run.termination_reason or None,
        "error": run.error or None,
        "reward": run.reward,
        "reward_info": run.reward_info,
        "usage": {
            "messages": run.n_messages,
            "tool_calls": run.n_tool_calls,
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "cost_usd": str(run.cost_usd) if run.cost_usd is not None else None,
        },
        "provenance": run.provenance,
        "messages": [e.message for e in run.events.order_by("seq")],
    }


def run_export_tau2(run: Run) -> dict[str, Any]:
    """The run in τ²-bench's own results format (``tau2.data_model.simulation.Results``)."""
    from tau2_env import catalog

    provenance = run.provenance or {}
    messages = [e.message for e in run.events.order_by("seq")]
    duration = (
        (run.finished_at - run.started_at).total_seconds()
        if run.finished_at and run.started_at
        else 0.0
    )
    simulation = {
        "id": f"tau2-studio-run-{run.pk}",
        "task_id": run.task.task_id,
        "timestamp": _iso(run.created_at),
        "start_time": _iso(run.started_at) or _iso(run.created_at),
        "end_time": _iso(run.finished_at) or _iso(run.created_at),
        "duration": duration,
        "termination_reason": run.termination_reason or "agent_error",
        "agent_cost": float(run.cost_usd) if run.cost_usd is not None else None,
        "user_cost": None,
        "reward_info": run.reward_info,
        "messages": messages,
        "trial": 0,
        "seed": run.seed,
    }
    agent = provenance.get("agent") or {}
    user = provenance.get("user") or {}
    return {
        "timestamp": _iso(run.created_at),
        "info": {
            "git_commit": provenance.get("tau2_version", ""),
            "num_trials": 1,
            "max_steps": run.max_steps,
            "max_errors": 10,
            "user_info": {
                "implementation": "user_simulator",
                "llm": run.user_model,
                "llm_args": {"temperature": 0},
            },
            "agent_info": {
                "implementation": "llm_agent" if run.kind == Run.Kind.MODEL else "human",
                "llm": run.agent_model if run.kind == Run.Kind.MODEL else None,
                "llm_args": {"temperature": 0} if run.kind == Run.Kind.MODEL else None,
            },
            "environment_info": {
                "domain_name": run.domain,
                "policy": catalog.get_domain(run.domain).policy,
                "tool_defs": None,
            },
            "seed": run.seed,
            "tau2_studio": {"run_id": run.pk, "agent": agent, "user": user},
        },
        "tasks": [catalog.get_tau2_task(run.domain, run.task.task_id).model_dump(mode="json")],
        "simulations": [simulation],
    }


def compare_columns(runs: list[Run]) -> list[dict[str, Any]]:
    return [
        {
            "run": run,
            "events": [presenters.event_view(e) for e in run.events.order_by("seq")],
            "result": presenters.reward_view(run.reward_info),
        }
        for run in runs
    ]


def _signature(event: dict[str, Any] | None) -> tuple:
    if event is None:
        return ("missing",)
    calls = tuple((c["name"], c["arguments"]) for c in event["tool_calls"])
    return (event["kind"], " ".join(event["content"].split()), calls, event["result"])


def compare_rows(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs aligned turn by turn; a row differs when any cell differs from another."""
    length = max((len(c["events"]) for c in columns), default=0)
    rows = []
    for index in range(length):
        cells = [c["events"][index] if index < len(c["events"]) else None for c in columns]
        signatures = {_signature(cell) for cell in cells}
        rows.append({"index": index, "cells": cells, "differs": len(signatures) > 1})
    return rows

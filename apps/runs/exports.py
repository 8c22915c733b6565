"""A run as JSON: the studio's own trace, τ²-bench's results format, and compare columns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from apps.connections.llm_routes import side_provenance
from apps.runs import diagnosis, presenters
from apps.runs.models import Run
from apps.runs.spec import RunSpec
from tau2_env.engine import catalog
from tau2_env.engine.results import agent_info, user_info

EXPORT_VERSION = 1


def _iso(value) -> str | None:
    return value.isoformat() if value else None


def _money(value) -> str | None:
    return str(value) if value is not None else None


def _role_usage(prompt: int, completion: int, cost) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "cost_usd": _money(cost)}


def tau2_llm(*, connection, model: str) -> str:
    """A side's model as τ² names it in a results file: the litellm model string
    ``tau2 run --agent-llm`` would be given (``openai/<model>`` on an OpenAI or
    OpenAI-compatible connection, ``anthropic/<model>``…); a router model as it is."""
    if connection is None:
        return model
    return side_provenance(connection=connection, model=model)["litellm_model"]


def _copy(llm_args: Mapping[str, Any] | None) -> dict[str, Any]:
    """A side's τ² llm_args as an export holds them (a spec's, τ²'s default filled in).
    Stored arguments were checked when chosen (``tau2_env.llm.llm_args``): no key,
    endpoint or header can be among them."""
    return dict(llm_args or {})


def public_url(url: str) -> str:
    """``url`` without what may carry a secret: its query, fragment and user info."""
    parts = urlsplit(url or "")
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def public_side(side: Mapping[str, Any] | None) -> dict[str, Any]:
    """A side of a run's provenance as it may leave the server: its connection's
    endpoint without query or user info (never a key: provenance holds none)."""
    side = dict(side or {})
    if isinstance(side.get("connection"), Mapping):
        connection = dict(side["connection"])
        if connection.get("base_url"):
            connection["base_url"] = public_url(connection["base_url"])
        side["connection"] = connection
    return side


def public_provenance(provenance: Mapping[str, Any] | None) -> dict[str, Any]:
    provenance = dict(provenance or {})
    for role in ("agent", "user"):
        if role in provenance:
            provenance[role] = public_side(provenance[role])
    return provenance


def run_export(run: Run) -> dict[str, Any]:
    """Everything about a run that can leave the server — never a token or key."""
    spec = run.spec
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
        # Where each side ran (a connection by name, never its key) and τ²'s llm_args.
        "agent_connection": _connection_name(run.agent_connection),
        "user_connection": _connection_name(run.user_connection),
        "agent_llm_args": _copy(spec.agent.llm_args) if spec.agent.llm else None,
        "user_llm_args": _copy(spec.customer.llm_args),
        "max_steps": run.max_steps,
        "seed": run.seed,
        # A fork's parent run and the parent's message it replaced (apps.runs.forks).
        "parent": run.parent_id,
        "fork_seq": run.fork_seq,
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
            # The agent's calls (as before: τ²'s agent_cost), then each role's.
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "cost_usd": _money(run.cost_usd),
            "by_role": {
                "agent": _role_usage(run.prompt_tokens, run.completion_tokens, run.cost_usd),
                "customer": _role_usage(
                    run.user_prompt_tokens, run.user_completion_tokens, run.user_cost_usd
                ),
            },
            # Every priced call; null when a role that made calls has no price.
            "total_cost_usd": _money(presenters.cost_view(run)["total"]),
        },
        "provenance": public_provenance(run.provenance),
        # Database diff and expected-action trace, beside τ²'s verdict (null: no score).
        "diagnosis": diagnosis.run_diagnosis(run),
        "messages": [e.message for e in run.events.order_by("seq")],
    }


def tau2_simulation(run: Run, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One run as τ²'s ``SimulationRun``: its messages, verdict, ending, trial and the
    seed its orchestrator got (what τ² records per simulation)."""
    duration = (
        (run.finished_at - run.started_at).total_seconds()
        if run.finished_at and run.started_at
        else 0.0
    )
    return {
        "id": f"tau2-studio-run-{run.pk}",
        "task_id": run.task.task_id,
        "timestamp": _iso(run.created_at),
        "start_time": _iso(run.started_at) or _iso(run.created_at),
        "end_time": _iso(run.finished_at) or _iso(run.created_at),
        "duration": duration,
        "termination_reason": run.termination_reason or "agent_error",
        "agent_cost": float(run.cost_usd) if run.cost_usd is not None else None,
        "user_cost": float(run.user_cost_usd) if run.user_cost_usd is not None else None,
        "reward_info": run.reward_info,
        "messages": messages,
        "trial": run.trial if run.trial is not None else 0,
        "seed": run.seed,
    }


def _connection_name(connection) -> str | None:
    return connection.name if connection is not None else None


def tau2_info(
    *,
    spec: RunSpec,
    domain: str,
    num_trials: int,
    tau2_version: str = "",
    studio: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """τ²'s ``Info`` of a results file played with ``spec``: each side's model as τ²
    names it (:func:`tau2_llm`) with the τ² llm_args it ran with (never a key, a token
    or an endpoint), limits, the seed given. An agent that is no model (a person, an
    outside agent) is τ²'s ``human``."""
    agent, customer = spec.agent, spec.customer
    agent_llm = tau2_llm(connection=agent.connection, model=agent.model) if agent.llm else None
    return {
        "git_commit": tau2_version,
        "num_trials": num_trials,
        "max_steps": spec.max_steps,
        "max_errors": spec.max_errors,
        "user_info": user_info(
            llm=tau2_llm(connection=customer.connection, model=customer.model),
            llm_args=customer.llm_args or {},
        ),
        "agent_info": agent_info(llm=agent_llm, llm_args=agent.llm_args),
        "environment_info": {
            "domain_name": domain,
            "policy": catalog.results_policy(domain, spec.retrieval_config),
            "tool_defs": None,
        },
        "seed": spec.seed,
        # As `tau2 run --retrieval-config` records it (τ² 1.x, knowledge domains only).
        **({"retrieval_config": spec.retrieval_config} if spec.retrieval_config else {}),
        # τ² 1.x's `tau2 run --timeout` is in its RunConfig only: its Info (what a results
        # file keeps) has no field for it, so it goes beside the studio's own, never as τ²'s.
        "tau2_studio": {
            **(studio or {}),
            **_embedder_info(spec),
            **({"timeout": spec.timeout} if spec.timeout is not None else {}),
        },
    }


def _embedder_info(spec: RunSpec) -> dict[str, Any]:
    """The model a run's embeddings were made with, as τ² names a model (τ²'s results
    have no place for it: the studio's part of ``info`` keeps it); none without."""
    if spec.embedder is None:
        return {}
    model = tau2_llm(connection=spec.embedder.connection, model=spec.embedder.model)
    return {"embedding_model": model}


def tau2_tasks(domain: str, task_ids: list[str]) -> list[dict[str, Any]]:
    """τ²'s own task definitions of ``task_ids``, as a results file lists them."""
    return [catalog.get_tau2_task(domain, task_id).model_dump(mode="json") for task_id in task_ids]


def run_export_tau2(run: Run) -> dict[str, Any]:
    """The run in τ²-bench's own results format (``tau2.data_model.simulation.Results``)."""
    provenance = run.provenance or {}
    messages = [e.message for e in run.events.order_by("seq")]
    return {
        "timestamp": _iso(run.created_at),
        "info": tau2_info(
            # Its seed is the one given (as to `tau2 run --seed`); each simulation has
            # its trial's.
            spec=run.spec,
            domain=run.domain,
            num_trials=1,
            tau2_version=provenance.get("tau2_version", ""),
            studio={
                "run_id": run.pk,
                "agent": public_side(provenance.get("agent")),
                "user": public_side(provenance.get("user")),
            },
        ),
        "tasks": tau2_tasks(run.domain, [run.task.task_id]),
        "simulations": [tau2_simulation(run, messages)],
    }


def compare_columns(runs: list[Run]) -> list[dict[str, Any]]:
    columns = []
    for run in runs:
        events = [presenters.event_view(e) for e in run.events.order_by("seq")]
        columns.append(
            {
                "run": run,
                "sides": presenters.side_views(run),
                "events": events,
                "result": presenters.reward_view(run.reward_info),
                # DB changes and first divergent write; marks the events' tool calls too.
                "diagnosis": diagnosis.compare_summary(run, events=events),
            }
        )
    return columns


def _signature(event: dict[str, Any] | None) -> tuple:
    if event is None:
        return ("missing",)
    calls = tuple((c["name"], c["arguments"]) for c in event["tool_calls"])
    content = " ".join(event["content"].split())
    return (event["kind"], content, event.get("ended", ""), calls, event["result"])


def compare_rows(columns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs aligned turn by turn; a row differs when any cell differs from another."""
    length = max((len(c["events"]) for c in columns), default=0)
    rows = []
    for index in range(length):
        cells = [c["events"][index] if index < len(c["events"]) else None for c in columns]
        signatures = {_signature(cell) for cell in cells}
        rows.append({"index": index, "cells": cells, "differs": len(signatures) > 1})
    return rows

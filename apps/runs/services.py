"""Writes of runs: start, stop."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.runs.events import status_publish
from apps.runs.models import Run
from apps.tasks.models import Task
from apps.tasks.selectors import catalogue_latest
from tau2_env import catalog


def run_provenance(
    *, task: Task, agent: dict, user_model: str, max_steps: int, seed, agent_prices
) -> dict:
    """Where a run's result comes from: τ² version, task set, who played which side, args.

    Never a key or token.
    """
    latest = catalogue_latest()
    return {
        "tau2_version": catalog.tau2_version(),
        "task_set_hash": latest.task_set_hash if latest else catalog.catalogue_hash(),
        "domain": task.domain_id,
        "task_id": task.task_id,
        "agent": agent,
        "user": {
            "implementation": "tau2.user.user_simulator.UserSimulator",
            "model": user_model,
            "provider": "hf-inference-providers",
        },
        "args": {"max_steps": max_steps, "seed": seed, "temperature": 0},
        "agent_prices": list(agent_prices) if agent_prices else None,
    }


def run_create(
    *,
    user,
    task: Task,
    agent_model: str,
    user_model: str | None = None,
    max_steps: int = 100,
    seed: int | None = None,
    agent_prices: tuple | None = None,
) -> Run:
    """Queue a model run of ``task`` by ``user``. The worker gets only the run's id."""
    agent_model = (agent_model or "").strip()
    if not agent_model or " " in agent_model:
        raise ValidationError({"agent_model": "Pick an agent model, e.g. org/model."})
    if not 1 <= max_steps <= settings.TAU2_RUN_MAX_STEPS:
        raise ValidationError(
            {"max_steps": f"The step limit must be between 1 and {settings.TAU2_RUN_MAX_STEPS}."}
        )
    from tau2_env import config

    user_model = (user_model or "").strip() or config.provider_settings().model
    prices = (
        tuple(str(p) if p is not None else None for p in agent_prices) if agent_prices else None
    )
    run = Run.objects.create(
        kind=Run.Kind.MODEL,
        task=task,
        domain=task.domain_id,
        created_by=user,
        agent_model=agent_model,
        agent_provider=agent_model.split(":", 1)[1] if ":" in agent_model else "",
        user_model=user_model,
        max_steps=max_steps,
        seed=seed,
        provenance=run_provenance(
            task=task,
            agent={
                "implementation": "tau2.agent.llm_agent.LLMAgent",
                "model": agent_model,
                "provider": "hf-inference-providers",
            },
            user_model=user_model,
            max_steps=max_steps,
            seed=seed,
            agent_prices=prices,
        ),
    )
    from apps.runs.tasks import execute_run

    transaction.on_commit(lambda: execute_run.delay(run.pk))
    return run


def run_stop(*, run: Run, by) -> Run:
    """Stop a run: at once if it has not started, else between the worker's hops."""
    if run.is_final:
        return run
    stopped_now = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
        status=Run.Status.STOPPED,
        stop_requested=True,
        termination_reason="stopped",
        finished_at=timezone.now(),
    )
    if not stopped_now:
        Run.objects.filter(pk=run.pk).exclude(status__in=Run.FINAL).update(stop_requested=True)
    status_publish(run_id=run.pk)
    run.refresh_from_db()
    return run

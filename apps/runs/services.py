"""Writes of runs: start, re-run, stop (review labels: ``apps.runs.review``)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.inference.selectors import resolve_agent_model
from apps.runs import queue
from apps.runs.events import status_publish
from apps.runs.models import DEFAULT_MAX_ERRORS, Run
from apps.tasks.models import Task
from apps.tasks.selectors import catalogue_latest
from tau2_env import catalog, config
from tau2_env.evaluation import DEFAULT_SEED, trial_seeds


def run_provenance(
    *,
    task: Task,
    agent: dict,
    user_model: str,
    max_steps: int,
    seed,
    agent_prices,
    trial: int | None = None,
    trial_seed: int | None = None,
    max_errors: int = DEFAULT_MAX_ERRORS,
) -> dict:
    """Where a run's result comes from: τ² version, task set, who played which side, args.

    ``seed`` is the seed given (as to ``tau2 run --seed``); ``trial_seed`` the one trial
    ``trial`` derives from it, which the orchestrator got. Never a key or token.
    """
    latest = catalogue_latest()
    args = {"max_steps": max_steps, "seed": seed, "temperature": 0}
    if trial is not None:
        args.update(trial=trial, trial_seed=trial_seed, max_errors=max_errors)
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
        "args": args,
        "agent_prices": list(agent_prices) if agent_prices else None,
    }


def model_run_validate(*, agent_model: str, max_steps: int) -> str:
    """The agent model id, stripped; raises ``ValidationError`` for what no run may have."""
    agent_model = (agent_model or "").strip()
    if not agent_model or " " in agent_model:
        raise ValidationError({"agent_model": "Pick an agent model, e.g. org/model."})
    if not 1 <= max_steps <= settings.TAU2_RUN_MAX_STEPS:
        raise ValidationError(
            {"max_steps": f"The step limit must be between 1 and {settings.TAU2_RUN_MAX_STEPS}."}
        )
    return agent_model


def model_run_build(
    *,
    user,
    task: Task,
    agent_model: str,
    user_model: str,
    max_steps: int,
    seed: int,
    trial: int,
    trial_seed: int,
    prices: tuple | None,
    max_errors: int = DEFAULT_MAX_ERRORS,
    evaluation=None,
) -> Run:
    """An unsaved model run of ``task`` (trial ``trial`` of ``seed``, run with ``trial_seed``)."""
    price_in, price_out = (
        Decimal(str(p)) if p is not None else None for p in prices or (None, None)
    )
    return Run(
        kind=Run.Kind.MODEL,
        task=task,
        domain=task.domain_id,
        created_by=user,
        agent_model=agent_model,
        agent_provider=agent_model.split(":", 1)[1] if ":" in agent_model else "",
        user_model=user_model,
        max_steps=max_steps,
        max_errors=max_errors,
        seed=trial_seed,
        given_seed=seed,
        seed_trial=trial,
        agent_price_input=price_in,
        agent_price_output=price_out,
        evaluation=evaluation,
        trial=trial if evaluation is not None else None,
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
            trial=trial,
            trial_seed=trial_seed,
            max_errors=max_errors,
        ),
    )


def prices_for_storage(agent_prices: tuple | None) -> tuple | None:
    return tuple(str(p) if p is not None else None for p in agent_prices) if agent_prices else None


def run_create(
    *,
    user,
    task: Task,
    agent_model: str,
    user_model: str | None = None,
    max_steps: int = 100,
    seed: int | None = None,
    agent_prices: tuple | None = None,
    trial: int = 0,
    max_errors: int = DEFAULT_MAX_ERRORS,
) -> Run:
    """Queue a model run of ``task`` by ``user``. The worker gets only the run's id.

    The run is trial ``trial`` (0 unless it repeats an evaluation's trial) of ``seed``
    (``tau2 run``'s default 300 when none is given): the orchestrator gets the seed
    ``tau2 run --seed <seed>`` would derive for that trial.
    """
    agent_model = model_run_validate(agent_model=agent_model, max_steps=max_steps)
    user_model = (user_model or "").strip() or config.provider_settings().model
    seed = DEFAULT_SEED if seed is None else seed
    run = model_run_build(
        user=user,
        task=task,
        agent_model=agent_model,
        user_model=user_model,
        max_steps=max_steps,
        seed=seed,
        trial=trial,
        trial_seed=trial_seeds(seed, trial + 1)[trial],
        prices=prices_for_storage(agent_prices),
        max_errors=max_errors,
    )
    run.dispatched_at = timezone.now()
    run.save()
    queue.run_enqueue(run.pk)
    return run


def run_settings_of(run: Run) -> dict:
    """What running ``run`` again repeats: its task, agent and customer models, step limit,
    the seed it was given, its trial of that seed and its error limit (so the orchestrator
    gets the same trial seed)."""
    return {
        "task": run.task,
        "agent_model": run.agent_model,
        "user_model": run.user_model,
        "max_steps": run.max_steps,
        "seed": run.given_seed,
        "trial": run.seed_trial,
        "max_errors": run.max_errors,
    }


def run_rerun(*, run: Run, by) -> Run:
    """A new run by ``by`` of a finished model run, with the same settings and seed; the old
    run is left as it is. The agent model is priced as the catalogue prices it now.

    Raises ``ValidationError`` when ``run`` is a play session or still going, or when its
    agent model can no longer run (gone from the catalogue, provider down).
    """
    if run.kind != Run.Kind.MODEL or not run.is_final:
        raise ValidationError("Only a finished model run can be run again.")
    kept = run_settings_of(run)
    try:
        model = resolve_agent_model(kept.pop("agent_model"))
    except ValueError as exc:
        raise ValidationError({"agent_model": str(exc)}) from exc
    return run_create(user=by, agent_model=model.value, agent_prices=model.prices, **kept)


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

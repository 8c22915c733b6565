"""Writes of runs: start, re-run, stop (review labels: ``apps.runs.review``)."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.connections.llm_routes import connection_value, prices_of, route_resolve, side_provenance
from apps.inference.selectors import resolve_agent_model
from apps.runs import queue
from apps.runs.events import status_publish
from apps.runs.models import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS, Run
from apps.tasks.models import Task
from apps.tasks.selectors import catalogue_latest
from tau2_env import config
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import DEFAULT_SEED, trial_seeds
from tau2_env.llm.llm_args import DEFAULT_AGENT_ARGS, DEFAULT_USER_ARGS


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
    user_connection=None,
    user_llm_args: dict | None = None,
    judge: dict | None = None,
) -> dict:
    """Where a run's result comes from: τ² version, task set, who played which side, args.

    ``seed`` is the seed given (as to ``tau2 run --seed``); ``trial_seed`` the one trial
    ``trial`` derives from it, which the orchestrator got. ``agent`` says who played the
    agent (with its ``llm_args`` when a model did); the customer's side is
    ``user_model`` on ``user_connection`` (None: the router) with ``user_llm_args``
    (None: τ²'s default). ``args.temperature`` is the agent's, when it has one. Never a
    key or token.
    """
    latest = catalogue_latest()
    user_llm_args = dict(DEFAULT_USER_ARGS) if user_llm_args is None else user_llm_args
    args = {"max_steps": max_steps, "seed": seed}
    agent_args = agent.get("llm_args")
    if agent_args is not None and "temperature" in agent_args:
        args["temperature"] = agent_args["temperature"]
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
            **side_provenance(connection=user_connection, model=user_model),
            "llm_args": user_llm_args,
        },
        # τ²'s NL judge: its own model, or (None) the customer's route.
        "judge": judge,
        "args": args,
        "agent_prices": list(agent_prices) if agent_prices else None,
    }


def customer_prices(*, user_connection, user_model: str) -> dict:
    """A new run's customer prices as ``Run`` fields: fixed now from the connection's
    price of ``user_model``; none for the router (looked up at the first message,
    ``apps.runs.events.customer_prices``)."""
    if user_connection is None:
        return {}
    prices = prices_of(connection=user_connection, model=user_model)
    return {
        "user_prices_fixed": True,
        "user_price_input": prices[0] if prices else None,
        "user_price_output": prices[1] if prices else None,
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
    agent_connection=None,
    user_connection=None,
    agent_llm_args: dict | None = None,
    user_llm_args: dict | None = None,
    judge_model: str = "",
    judge_connection=None,
) -> Run:
    """An unsaved model run of ``task`` (trial ``trial`` of ``seed``, run with ``trial_seed``).

    Each side runs on its connection (None: Hugging Face's router) with its τ²
    ``llm_args`` (None: τ²'s default, ``{"temperature": 0.0}``). A customer on a
    connection is priced now, from the connection's price of that model.
    """
    price_in, price_out = (
        Decimal(str(p)) if p is not None else None for p in prices or (None, None)
    )
    agent_llm_args = dict(DEFAULT_AGENT_ARGS) if agent_llm_args is None else agent_llm_args
    user_llm_args = dict(DEFAULT_USER_ARGS) if user_llm_args is None else user_llm_args
    customer = customer_prices(user_connection=user_connection, user_model=user_model)
    return Run(
        agent_connection=agent_connection,
        user_connection=user_connection,
        judge_model=judge_model or "",
        judge_connection=judge_connection if judge_model else None,
        agent_llm_args=agent_llm_args,
        user_llm_args=user_llm_args,
        **customer,
        kind=Run.Kind.MODEL,
        task=task,
        domain=task.domain_id,
        created_by=user,
        agent_model=agent_model,
        agent_provider=(
            agent_model.split(":", 1)[1] if ":" in agent_model and not agent_connection else ""
        ),
        user_model=user_model,
        user_provider=user_connection.kind if user_connection is not None else "hf",
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
                **side_provenance(connection=agent_connection, model=agent_model),
                "llm_args": agent_llm_args,
            },
            user_model=user_model,
            max_steps=max_steps,
            seed=seed,
            agent_prices=prices,
            trial=trial,
            trial_seed=trial_seed,
            max_errors=max_errors,
            user_connection=user_connection,
            user_llm_args=user_llm_args,
            judge=_judge(judge_connection, judge_model),
        ),
    )


def _judge(connection, model: str) -> dict | None:
    """The NL judge's side in a provenance: ``None`` when it is the customer's."""
    if not model:
        return None
    return {
        "implementation": "tau2 NL-assertion judge",
        **side_provenance(connection=connection, model=model),
    }


# τ²'s classes of each mode's sides, as a run's provenance names them.
MODE_CLASSES = {
    Run.Mode.DEFAULT: ("tau2.agent.llm_agent.LLMAgent", "tau2.user.user_simulator.UserSimulator"),
    Run.Mode.NO_USER: ("tau2.agent.llm_agent.LLMSoloAgent", "tau2.user.user_simulator.DummyUser"),
    Run.Mode.ORACLE_PLAN: (
        "tau2.agent.llm_agent.LLMGTAgent",
        "tau2.user.user_simulator.UserSimulator",
    ),
}


def run_in_mode(run: Run, mode: str) -> Run:
    """``run`` (unsaved) in ``mode``: the mode, and its provenance naming τ²'s classes."""
    run.mode = mode
    agent_class, user_class = MODE_CLASSES[Run.Mode(mode)]
    run.provenance["agent"]["implementation"] = agent_class
    run.provenance["user"]["implementation"] = user_class
    run.provenance["mode"] = mode
    return run


def prices_for_storage(agent_prices: tuple | None) -> tuple | None:
    return tuple(str(p) if p is not None else None for p in agent_prices) if agent_prices else None


def run_create(
    *,
    user,
    task: Task,
    agent_model: str,
    user_model: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    seed: int | None = None,
    agent_prices: tuple | None = None,
    trial: int = 0,
    max_errors: int = DEFAULT_MAX_ERRORS,
    agent_connection=None,
    user_connection=None,
    agent_llm_args: dict | None = None,
    user_llm_args: dict | None = None,
    judge_model: str = "",
    judge_connection=None,
    mode: str = Run.Mode.DEFAULT,
) -> Run:
    """Queue a model run of ``task`` by ``user``. The worker gets only the run's id.
    ``mode`` is the paper's ablation (``Run.Mode``), as an evaluation's runs have it.

    Each side on its connection (None: Hugging Face's router, on ``user``'s token) with
    its τ² ``llm_args`` (None: τ²'s default); see :func:`model_run_build`.

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
        agent_connection=agent_connection,
        user_connection=user_connection,
        agent_llm_args=agent_llm_args,
        user_llm_args=user_llm_args,
        judge_model=judge_model,
        judge_connection=judge_connection,
    )
    run_in_mode(run, mode)
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
        "agent_connection": run.agent_connection,
        "user_connection": run.user_connection,
        "agent_llm_args": run.agent_llm_args,
        "user_llm_args": run.user_llm_args,
        "judge_model": run.judge_model,
        "judge_connection": run.judge_connection,
        "mode": run.mode,
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
    agent_model = kept.pop("agent_model")
    if run.agent_connection is not None:
        try:
            resolved = route_resolve(
                connection_value(slug=run.agent_connection.slug, model=agent_model), user=by
            )
        except ValueError as exc:
            raise ValidationError({"agent_model": str(exc)}) from exc
        return run_create(user=by, agent_model=agent_model, agent_prices=resolved.prices, **kept)
    try:
        model = resolve_agent_model(agent_model)
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

"""Writes of runs: start, re-run, stop (review labels: ``apps.runs.review``)."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.accounts.vault import SignInRequired, hf_token_for
from apps.connections.llm_routes import connection_value, prices_of, route_resolve, side_provenance
from apps.inference.selectors import resolve_agent_model
from apps.runs import endings, queue
from apps.runs.events import status_publish
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side, spec_columns
from apps.tasks.models import Task
from apps.tasks.selectors import catalogue_latest
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import trial_seeds


def run_provenance(
    *,
    task: Task,
    spec: RunSpec,
    agent: dict | None = None,
    agent_prices=None,
    trial: int | None = None,
    trial_seed: int | None = None,
) -> dict:
    """Where a run's result comes from: τ² version, task set, who played which side, args.

    ``spec.seed`` is the seed given (as to ``tau2 run --seed``); ``trial_seed`` the one
    trial ``trial`` derives from it, which the orchestrator got. ``agent`` says who
    played the agent when no model did (a person, an outside agent); else it is
    ``spec.agent`` with its ``llm_args``. ``args.temperature`` is the agent's, when it
    has one. Never a key or token.
    """
    latest = catalogue_latest()
    if agent is None:
        agent = {
            "implementation": "tau2.agent.llm_agent.LLMAgent",
            **side_provenance(connection=spec.agent.connection, model=spec.agent.model),
            "llm_args": spec.agent.llm_args,
        }
    args = {"max_steps": spec.max_steps, "seed": spec.seed}
    agent_args = agent.get("llm_args")
    if agent_args is not None and "temperature" in agent_args:
        args["temperature"] = agent_args["temperature"]
    if trial is not None:
        args.update(trial=trial, trial_seed=trial_seed, max_errors=spec.max_errors)
    if spec.timeout is not None:  # `tau2 run --timeout`, seconds of wall clock
        args["timeout"] = spec.timeout
    customer = spec.customer
    return {
        "tau2_version": catalog.tau2_version(),
        "task_set_hash": latest.task_set_hash if latest else catalog.catalogue_hash(),
        "domain": task.domain_id,
        "task_id": task.task_id,
        "agent": agent,
        "user": {
            "implementation": "tau2.user.user_simulator.UserSimulator",
            **side_provenance(connection=customer.connection, model=customer.model),
            "llm_args": customer.llm_args,
        },
        # τ²'s NL judge: its own model, or (None) the customer's route.
        "judge": _judge(spec.judge),
        "args": args,
        "agent_prices": list(agent_prices) if agent_prices else None,
        # A knowledge domain's retrieval configuration (`tau2 run --retrieval-config`).
        **({"retrieval_config": spec.retrieval_config} if spec.retrieval_config else {}),
        # Its embeddings: the connection model that made them, and τ²'s model for them.
        **(
            {"embedder": _embedder(spec, domain=task.domain_id)}
            if spec.embedder is not None
            else {}
        ),
    }


def _embedder(spec: RunSpec, *, domain: str) -> dict:
    """Where a run's embeddings were made (never a key), and the model τ² names for them."""
    assert spec.embedder is not None
    return {
        **side_provenance(connection=spec.embedder.connection, model=spec.embedder.model),
        "tau2_model": catalog.retrieval_embedder(
            domain=domain, retrieval_config=spec.retrieval_config
        ),
    }


def customer_prices(customer: Side) -> dict:
    """A new run's customer prices as ``Run`` fields: fixed now from the connection's
    price of the customer's model; none for the router (looked up at the first message,
    ``apps.runs.events.customer_prices``)."""
    if customer.connection is None:
        return {}
    prices = prices_of(connection=customer.connection, model=customer.model)
    return {
        "user_prices_fixed": True,
        "user_price_input": prices[0] if prices else None,
        "user_price_output": prices[1] if prices else None,
    }


def user_provider(customer: Side) -> str:
    """Where the customer runs, as ``Run.user_provider`` says it: its connection's kind,
    or ``hf`` (the router)."""
    return customer.connection.kind if customer.connection is not None else "hf"


# The code of the ValidationErrors :func:`spec_sign_in_check` raises, which tell this
# refusal from a model that cannot run at all (the pickers' ``invalid_model``).
SIGN_IN = "sign_in"


def sign_in_message(*, role: str, model: str, why: str) -> str:
    """What a person is told when ``model`` (the ``role``'s, on Hugging Face's router)
    cannot run for them, ``why`` being the vault's reason: what to fix, in words."""
    article = "an" if role[:1].lower() in "aeiou" or role.startswith("NL") else "a"
    return (
        f"The {role} model {model} runs on Hugging Face Inference Providers, on your own "
        f"Hugging Face sign-in: {why} Or pick {article} {role} model on a connection."
    )


def spec_router_sides(spec: RunSpec) -> list[tuple[str, str, Side]]:
    """The sides of ``spec`` a model plays on Hugging Face's router, on its starter's own
    token: ``(form field, role, side)`` for the agent, the customer (the server's one
    when none was picked) and the NL judge; a side on a connection, or that no model
    plays (a person, an outside agent), is not one."""
    sides = (
        ("agent_model", "agent", spec.agent if spec.agent.llm else None),
        ("user_model", "customer", spec.customer),
        ("judge_model", "NL judge", spec.judge),
    )
    return [(f, r, s) for f, r, s in sides if s is not None and s.connection is None]


def spec_sign_in_check(spec: RunSpec, *, user) -> None:
    """Refuse ``spec`` before anything is stored when a side of it (its agent model, its
    customer — the server's one when none was picked —, its NL judge) runs on Hugging
    Face's router and ``user`` has no usable Hugging Face token (a developer sign-in, a
    revoked or expired one): raises ``ValidationError`` (code :data:`SIGN_IN`) on each
    such side's form field, saying what to fix. A side on a connection needs no sign-in;
    a side no model plays (a person, an outside agent) none either."""
    routed = spec_router_sides(spec)
    if not routed:
        return
    try:
        hf_token_for(user=user)  # the token itself: refreshed now if it must be
    except SignInRequired as exc:
        raise ValidationError(
            {
                field: ValidationError(
                    sign_in_message(role=role, model=side.model, why=str(exc)), code=SIGN_IN
                )
                for field, role, side in routed
            }
        ) from exc


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


def spec_validate(spec: RunSpec) -> RunSpec:
    """``spec`` for a model run: its agent model stripped and a seed (τ²'s default if it
    has none); raises ``ValidationError`` as :func:`model_run_validate` does."""
    model = model_run_validate(agent_model=spec.agent.model, max_steps=spec.max_steps)
    return replace(spec, agent=replace(spec.agent, model=model)).seeded()


def spec_for_domain(spec: RunSpec, domain: str) -> RunSpec:
    """``spec`` for a conversation on ``domain`` (:meth:`RunSpec.for_domain`: a knowledge
    domain's retrieval configuration filled in); raises ``ValidationError`` saying why
    ``domain`` cannot run with the one chosen, or why its timeout cannot be given here
    (τ² 0.2 has no ``tau2 run --timeout``)."""
    refusal = catalog.timeout_refusal(spec.timeout)
    if refusal is not None:
        raise ValidationError({"timeout": refusal})
    try:
        return spec.for_domain(domain)
    except ValueError as exc:
        raise ValidationError({"retrieval_config": str(exc)}) from None


def model_run_build(
    *,
    user,
    task: Task,
    spec: RunSpec,
    trial: int,
    trial_seed: int,
    prices: tuple | None,
    evaluation=None,
) -> Run:
    """An unsaved model run of ``task`` played with ``spec`` (trial ``trial`` of
    ``spec.seed``, run with ``trial_seed``). A customer on a connection is priced now,
    from the connection's price of that model.
    """
    price_in, price_out = (
        Decimal(str(p)) if p is not None else None for p in prices or (None, None)
    )
    spec = spec_for_domain(spec, task.domain_id)
    return Run(
        **spec_columns(spec, seed_field="given_seed"),
        **customer_prices(spec.customer),
        kind=Run.Kind.MODEL,
        task=task,
        domain=task.domain_id,
        created_by=user,
        user_provider=user_provider(spec.customer),
        seed=trial_seed,
        seed_trial=trial,
        agent_price_input=price_in,
        agent_price_output=price_out,
        evaluation=evaluation,
        trial=trial if evaluation is not None else None,
        provenance=run_provenance(
            task=task,
            spec=spec,
            agent_prices=prices,
            trial=trial,
            trial_seed=trial_seed,
        ),
    )


def _judge(judge: Side | None) -> dict | None:
    """The NL judge's side in a provenance: ``None`` when it is the customer's."""
    if judge is None:
        return None
    return {
        "implementation": "tau2 NL-assertion judge",
        **side_provenance(connection=judge.connection, model=judge.model),
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


def run_in_mode(run: Run) -> Run:
    """``run`` (unsaved) in its spec's mode: its provenance names τ²'s classes of it."""
    agent_class, user_class = MODE_CLASSES[Run.Mode(run.mode)]
    run.provenance["agent"]["implementation"] = agent_class
    run.provenance["user"]["implementation"] = user_class
    run.provenance["mode"] = run.mode
    return run


def prices_for_storage(agent_prices: tuple | None) -> tuple | None:
    return tuple(str(p) if p is not None else None for p in agent_prices) if agent_prices else None


def run_create(
    *,
    user,
    task: Task,
    spec: RunSpec,
    agent_prices: tuple | None = None,
    trial: int = 0,
) -> Run:
    """Queue a model run of ``task`` by ``user``, played with ``spec``. The worker gets
    only the run's id. Each side on its connection (None: Hugging Face's router, on
    ``user``'s token).

    The run is trial ``trial`` (0 unless it repeats an evaluation's trial) of
    ``spec.seed``: the orchestrator gets the seed ``tau2 run --seed <seed>`` would
    derive for that trial.
    """
    spec = spec_validate(spec)
    spec_sign_in_check(spec, user=user)
    run = model_run_build(
        user=user,
        task=task,
        spec=spec,
        trial=trial,
        trial_seed=trial_seeds(spec.seed, trial + 1)[trial],
        prices=prices_for_storage(agent_prices),
    )
    run_in_mode(run)
    run.dispatched_at = timezone.now()
    run.save()
    queue.run_enqueue(run.pk)
    return run


def run_rerun(*, run: Run, by) -> Run:
    """A new run by ``by`` of a finished model run, with the same spec, seed and trial;
    the old run is left as it is. The agent model is priced as the catalogue prices it
    now.

    Raises ``ValidationError`` when ``run`` is a play session or still going, or when its
    agent model can no longer run (gone from the catalogue, provider down).
    """
    if run.kind != Run.Kind.MODEL or not run.is_final:
        raise ValidationError("Only a finished model run can be run again.")
    spec = run.spec
    agent = spec.agent
    try:
        if agent.connection is not None:
            resolved = route_resolve(
                connection_value(slug=agent.connection.slug, model=agent.model), user=by
            )
            prices = resolved.prices
        else:
            model = resolve_agent_model(agent.model)
            agent, prices = replace(agent, model=model.value), model.prices
    except ValueError as exc:
        raise ValidationError({"agent_model": str(exc)}) from exc
    return run_create(
        user=by,
        task=run.task,
        spec=replace(spec, agent=agent),
        agent_prices=prices,
        trial=run.seed_trial,
    )


def run_stop(*, run: Run, by) -> Run:
    """Stop a run: at once if it has not started, else between the worker's hops."""
    if run.is_final:
        return run
    stopped_now = Run.objects.filter(pk=run.pk, status=Run.Status.QUEUED).update(
        status=Run.Status.STOPPED,
        loop_length=endings.measured_loop(run.pk),  # a fork has its parent's messages
        stop_requested=True,
        termination_reason="stopped",
        finished_at=timezone.now(),
    )
    if not stopped_now:
        Run.objects.filter(pk=run.pk).exclude(status__in=Run.FINAL).update(stop_requested=True)
    status_publish(run_id=run.pk)
    run.refresh_from_db()
    return run

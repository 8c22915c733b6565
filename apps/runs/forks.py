"""Forks: a new run that continues a finished run's conversation from one of its messages.

A fork at message ``S`` of a run keeps the run's messages before ``S`` (the *prefix*,
copied as they were stored) and replaces ``S`` and everything after it: by an agent
model (another one, or the same with another seed) on a worker, or by the person who
forked it, as a play session. Nothing is replayed here: the fork is a run whose stored
messages are the prefix, and the worker (``apps.runs.runner``) or the play page
(``apps.play.services``) continues it as it continues any stored conversation — τ²'s
orchestrator replays the prefix's tool calls onto a fresh environment (the environment
is then exactly the parent's just before ``S``) and sends the model the prefix, as
``tau2 run`` would with that history.

A person takes a fork over through the play app, which registers how
(``apps.runs.hooks.fork_takeover_register``, in ``PlayConfig.ready``): the runs app
knows nothing of play sessions.

A fork records its parent and fork point (``Run.parent``, ``Run.fork_seq``); it is a run
like any other, never one of an evaluation's trials. Its usage counts only its own calls:
the prefix's were the parent's.

What a page reads of forks (the lineage, whether one may fork here, where a comparison
of a family starts) is in :mod:`apps.runs.lineage`, apart from these writes: rendering a
run needs no model route, hence none of the engine.
"""

from __future__ import annotations

from dataclasses import replace

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.access import can_start
from apps.connections.llm_routes import can_use, route_resolve
from apps.runs import hooks, queue
from apps.runs.lineage import FORKABLE, fork_compare_from, fork_context  # noqa: F401 (read here too)
from apps.runs.models import Run, RunEvent
from apps.runs.services import (
    model_run_build,
    model_run_validate,
    prices_for_storage,
    spec_sign_in_check,
)
from apps.runs.spec import RunSpec, Side
from tau2_env.engine.evaluation import trial_seeds


def fork_point(*, run: Run, at_seq) -> RunEvent:
    """The message ``at_seq`` of ``run`` if a fork may replace it; raises
    ``ValidationError`` otherwise (the run is not over, no such message, the greeting,
    or a tool's result, or a run of an ablation)."""
    if not run.is_final:
        raise ValidationError("Only a finished run can be forked.")
    if run.mode != Run.Mode.DEFAULT:
        raise ValidationError(
            f"A run of the {run.get_mode_display()} ablation cannot be forked: τ² plays it "
            "with another agent and user, whose conversation a fork cannot take over. Run "
            "it again instead."
        )
    try:
        seq = int(at_seq)
    except (TypeError, ValueError):
        raise ValidationError({"at": "Name the message to fork at by its number."}) from None
    event = run.events.filter(seq=seq).first() if 0 < seq < 2**31 else None
    if event is None:
        raise ValidationError({"at": f"Run {run.pk} has no message {at_seq} to fork at."})
    if event.kind not in FORKABLE:
        raise ValidationError(
            {"at": "A tool's result follows from its call: fork at the call instead."}
        )
    return event


def run_fork(
    *,
    run: Run,
    at_seq: int,
    by,
    agent_model: str | None = None,
    seed: int | None = None,
    user_model: str | None = None,
    as_play: bool = False,
) -> Run:
    """A new run by ``by`` whose history is ``run``'s messages before ``at_seq``.

    Continued by ``agent_model`` (default: ``run``'s, for a model run) with ``seed``
    given as to ``tau2 run --seed`` (default: ``run``'s own orchestrator seed), or, with
    ``as_play``, by ``by`` on the play page; the customer by ``user_model`` (default:
    ``run``'s). Raises ``PermissionDenied`` unless ``by`` may start runs, and
    ``ValidationError`` for a fork point no fork may have (:func:`fork_point`), a model
    that cannot run, or (play) no usable token.
    """
    if not can_start(by):
        raise PermissionDenied("Sign in to fork runs.")
    point = fork_point(run=run, at_seq=at_seq)
    spec = _fork_spec(run=run, by=by, user_model=user_model)
    prefix = list(run.events.filter(seq__lt=point.seq).order_by("seq"))
    takeover = hooks.fork_takeover() if as_play else None
    if as_play and takeover is None:
        raise ValidationError("Taking a fork over as play is not available on this server.")
    with transaction.atomic():
        if takeover is not None:
            # The person plays the parent's trial (its orchestrator's seed) unless told, at
            # their own pace: a play session has no wall-clock timeout.
            fork = takeover(
                run=run,
                by=by,
                spec=replace(spec, seed=run.seed if seed is None else seed, timeout=None),
                next_=point,
            )
        else:
            fork = _model_fork(run=run, by=by, spec=spec, agent_model=agent_model, seed=seed)
        fork.parent, fork.fork_seq = run, point.seq
        fork.provenance = {**fork.provenance, "fork": {"parent": run.pk, "at_seq": point.seq}}
        fork.n_messages = len(prefix)
        fork.n_tool_calls = sum(
            len(e.message.get("tool_calls") or []) for e in prefix if e.kind in FORKABLE
        )
        fork.save()
        RunEvent.objects.bulk_create(
            RunEvent(run=fork, seq=e.seq, kind=e.kind, message=e.message) for e in prefix
        )
        _queue(fork, next_=point)
    return fork


def _fork_spec(*, run: Run, by, user_model: str | None) -> RunSpec:
    """The spec a fork of ``run`` goes on with: ``run``'s, its customer ``user_model``
    (a picker's value; empty: the run's own, where it ran, if ``by`` may use it) with
    the run's customer LLM arguments."""
    spec = run.spec
    wanted = (user_model or "").strip()
    if wanted:
        try:
            customer = route_resolve(wanted, user=by, role="customer")
        except ValueError as exc:
            raise ValidationError({"user_model": str(exc)}) from exc
        side = Side(customer.model, customer.connection, spec.customer.llm_args)
        return replace(spec, customer=side)
    connection = spec.customer.connection
    if connection is not None and not can_use(by, connection):
        raise ValidationError(
            {
                "user_model": f"You may not use the connection {connection.name!r}: "
                "pick another customer model."
            }
        )
    return spec


def _model_fork(*, run: Run, by, spec: RunSpec, agent_model, seed) -> Run:
    """A model run that continues ``run`` with ``spec``: ``agent_model`` (a picker's
    value; default the run's own, where it ran) with the run's LLM arguments (τ²'s
    default when a person or an outside agent played it)."""
    chosen = agent_model or (run.agent_value if run.kind == Run.Kind.MODEL else "")
    if not chosen:
        raise ValidationError({"agent_model": "Pick the agent model that continues it."})
    try:
        model = route_resolve(chosen, user=by)
    except ValueError as exc:
        raise ValidationError({"agent_model": str(exc)}) from exc
    args = spec.agent.llm_args if run.kind == Run.Kind.MODEL else None
    # Its customer judges, as a fork's always has (forks are of default-mode runs only).
    spec = replace(spec, agent=Side(model.model, model.connection, args), judge=None)
    model_run_validate(agent_model=model.model, max_steps=spec.max_steps)
    spec_sign_in_check(spec, user=by)
    if seed is None:  # the parent's own trial of its seed: the orchestrator gets run.seed
        trial, trial_seed = run.seed_trial, run.seed
    else:
        spec, trial, trial_seed = replace(spec, seed=seed), 0, trial_seeds(seed, 1)[0]
    fork = model_run_build(
        user=by,
        task=run.task,
        spec=spec,
        trial=trial,
        trial_seed=trial_seed,
        prices=prices_for_storage(model.prices),
    )
    fork.dispatched_at = timezone.now()
    return fork


def _queue(fork: Run, *, next_: RunEvent) -> None:
    """Hand the fork to whoever says message ``next_``'s part first: a model run to the
    workers; a play session's customer to a worker when it is the customer's turn (else
    the person acts)."""
    if fork.kind == Run.Kind.MODEL:
        queue.run_enqueue(fork.pk)
    elif next_.kind == RunEvent.Kind.CUSTOMER:
        queue.enqueue(queue.PLAY_CUSTOMER_TURN, fork.pk, fork.n_messages)

"""Writes of play sessions: start, say, call a tool, end, ask again.

A session is a ``Run`` of kind ``human``; its conversation is its stored events, so any
web process or worker continues it by rebuilding τ²'s episode (the engine's one driver)
from them. Where it is lives in ``Run.play_phase``, and every change of phase is made
here (:func:`_take` for the player's actions, :func:`play_claim` and
:func:`play_release` for the worker's side), each by one conditional UPDATE: of two
actions at once one wins and the other is refused. Whatever needs the customer's or the
judge's LLM runs on a Celery worker with the player's own token; tool calls run here,
in the request.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.connections.llm_routes import route_for
from apps.play import schemas, selectors
from apps.play.selectors import Phase
from apps.runs import budgets, defaults, endings, queue
from apps.runs.events import embedding_fields, events_publish, judge_fields, status_publish
from apps.runs.lifecycle import execution_id, run_finish
from apps.runs.models import Run, RunEvent
from apps.runs.services import (
    customer_prices,
    run_provenance,
    spec_for_domain,
    spec_sign_in_check,
    user_provider,
)
from apps.runs.spec import RunSpec, Side, spec_columns
from apps.tasks.models import Task
from tau2_env import config
from tau2_env.engine import episodes
from tau2_env.llm import embeddings, gateway

HUMAN_AGENT = "human"
# What a session's end stores besides the run's own fields (``run_finish``).
ENDED = {"play_phase": Run.PlayPhase.ENDED}


class PlayRefused(Exception):
    """The action is not possible now; ``str()`` says why, for the player."""


class ArgumentsInvalid(Exception):
    """The tool's arguments do not fit its schema; ``errors`` maps field paths to messages."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def pending_lease() -> timedelta:
    """How long a queued customer turn or scoring may take before the player may ask again.

    A turn can make several LLM calls (telecom's customer uses their phone first).
    """
    return timedelta(seconds=settings.TAU2_RUN_LEASE_SECONDS + 3 * config.llm_timeout())


def _tool_lease() -> timedelta:
    return timedelta(seconds=settings.TAU2_RUN_LEASE_SECONDS)


def play_spec(
    *,
    customer: Side | None = None,
    seed: int | None = None,
    max_steps: int | None = None,
    retrieval_config: str = "",
    embedder: Side | None = None,
) -> RunSpec:
    """A play session's spec: a person plays the agent against ``customer`` (None or no
    model: the server's default customer, τ²'s default LLM arguments); ``max_steps``
    None: the shared default (``apps.runs.defaults``), capped at the server's limit;
    ``seed`` the one that picked the task, if one did; ``retrieval_config`` a knowledge
    domain's (""; its default, set by :func:`play_start`); ``embedder`` the connection
    model that embeds for one that embeds."""
    return RunSpec(
        agent=Side(HUMAN_AGENT, llm=False),
        customer=customer or Side(),
        max_steps=min(max_steps or defaults.max_steps(), settings.TAU2_RUN_MAX_STEPS),
        seed=seed,
        retrieval_config=retrieval_config,
        embedder=embedder,
    )


def play_provenance(*, task: Task, spec: RunSpec) -> dict:
    """A play session's provenance (``run_provenance``): a person plays the agent."""
    return run_provenance(
        task=task,
        spec=spec,
        agent={"implementation": "a person (apps.play)", "model": HUMAN_AGENT},
    )


def play_task_pick(*, domain: str, split: str, seed: int | None) -> Task:
    """A task of ``split`` as the OpenEnv face picks it (same seed, same task)."""
    try:
        task_id = episodes.pick_task_id(domain=domain, split=split, seed=seed)
    except KeyError as exc:
        raise ValidationError({"split": str(exc.args[0])}) from None
    task = Task.objects.filter(domain_id=domain, task_id=task_id).first()
    if task is None:
        raise ValidationError({"task_id": f"No task {task_id!r} in {domain}."})
    return task


def play_start(*, user, task: Task, spec: RunSpec) -> Run:
    """Open a session of ``task`` for ``user``, played with ``spec`` (:func:`play_spec`),
    and queue the customer's opening message. The customer runs on its connection (None:
    the router on the player's own token).

    Raises ``ValidationError`` (``spec_sign_in_check``) when the customer is on the
    router and ``user`` has no usable token, before anything is stored.
    """
    spec_sign_in_check(spec, user=user)
    spec = spec_for_domain(spec, task.domain_id)
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.create(
            **spec_columns(spec, seed_field="given_seed"),
            **customer_prices(spec.customer),
            kind=Run.Kind.HUMAN,
            task=task,
            domain=task.domain_id,
            created_by=user,
            user_provider=user_provider(spec.customer),
            seed=spec.seed,
            status=Run.Status.RUNNING,
            started_at=now,
            play_phase=Phase.CUSTOMER,
            lease_expires_at=now + pending_lease(),
            provenance=play_provenance(task=task, spec=spec),
        )
        _queue_customer(run.pk, at=0)
    return run


def play_fork_build(*, run: Run, by, spec: RunSpec, next_: RunEvent) -> Run:
    """The unsaved play session of ``by`` that takes over a fork of ``run`` before message
    ``next_`` (``apps.runs.forks.run_fork`` with ``as_play``, through the runs' fork
    takeover hook), played with ``spec``'s customer, limits and seed: the customer's
    turn first when ``next_`` was theirs (the runs app queues it once the fork is
    saved), else the person's. Raises ``ValidationError`` with the vault's reason when
    ``by`` has no usable token (here, not later on a worker)."""
    spec = replace(spec, agent=Side(HUMAN_AGENT, llm=False), judge=None)
    spec_sign_in_check(spec, user=by)
    now = timezone.now()
    customer_next = next_.kind == RunEvent.Kind.CUSTOMER
    return Run(
        **spec_columns(spec, seed_field="given_seed"),
        **customer_prices(spec.customer),
        kind=Run.Kind.HUMAN,
        task=run.task,
        domain=run.domain,
        created_by=by,
        user_provider=user_provider(spec.customer),
        seed=spec.seed,
        status=Run.Status.RUNNING,
        started_at=now,
        play_phase=Run.PlayPhase.CUSTOMER if customer_next else Run.PlayPhase.YOUR_TURN,
        lease_expires_at=now + pending_lease() if customer_next else None,
        provenance=play_provenance(task=run.task, spec=spec),
    )


def _take(*, run: Run, to: Phase, allowed: tuple[Phase, ...], holder: str = "") -> int:
    """Move the session to ``to`` for one action of the player's; returns how many
    messages it has. Raises :class:`PlayRefused` unless its phase is one of ``allowed``.

    The row is locked while the phase is read, so of two actions at once one wins and
    the other is refused. ``holder`` is who works on it (the request, for a tool call;
    nobody yet for work queued for a worker).
    """
    refusal = ""
    lease = _tool_lease() if to == Phase.TOOL else pending_lease()
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        state = selectors.play_state(run=locked)
        if locked.stop_requested and not locked.is_final:
            # Someone pressed Stop on the run page: a session has no worker to honour it.
            _stop(locked)
            refusal = "This session was stopped."
        elif state.phase not in allowed:
            refusal = state.refusal or "Not possible now."
        else:
            Run.objects.filter(pk=run.pk).update(
                play_phase=to,
                worker=holder,
                lease_expires_at=timezone.now() + lease,
                error="",
            )
    if refusal:
        raise PlayRefused(refusal)
    return locked.n_messages


def _stop(run: Run) -> None:
    Run.objects.filter(pk=run.pk).exclude(status__in=Run.FINAL).update(
        status=Run.Status.STOPPED,
        loop_length=endings.measured_loop(run.pk),
        play_phase=Phase.ENDED,
        termination_reason="stopped",
        finished_at=timezone.now(),
        worker="",
        lease_expires_at=None,
    )
    transaction.on_commit(lambda: status_publish(run_id=run.pk))


def play_claim(*, run_id: int, phase: Phase, at: int, worker: str) -> Run | None:
    """Take the queued work of ``phase`` (asked when the session had ``at`` messages)
    for ``worker``; ``None`` if it is done, taken by a live worker, or superseded.

    A duplicated or redelivered task finds the phase or the message count changed, or
    the work held under a live lease, and does nothing.
    """
    now = timezone.now()
    claimed = (
        Run.objects.filter(
            pk=run_id,
            kind=Run.Kind.HUMAN,
            status=Run.Status.RUNNING,
            play_phase=phase,
            n_messages=at,
        )
        .filter(Q(worker="") | Q(lease_expires_at__lt=now))
        .update(worker=worker, lease_expires_at=now + pending_lease())
    )
    if not claimed:
        return None
    return Run.objects.select_related("task", "created_by").get(pk=run_id)


def play_release(*, run_id: int, holder: str, to: Phase, error: str = "", **fields: Any) -> bool:
    """Move the session on to ``to`` if ``holder`` still holds it; tell the browsers."""
    released = Run.objects.filter(pk=run_id, status=Run.Status.RUNNING, worker=holder).update(
        play_phase=to, worker="", lease_expires_at=None, error=error, **fields
    )
    status_publish(run_id=run_id)
    return bool(released)


def play_complete(*, run: Run, holder: str, episode: episodes.Episode) -> bool:
    """The scored end of the session (τ²'s verdict stored), if ``holder`` still holds it."""
    return run_finish(
        run=run,
        status=Run.Status.COMPLETED,
        worker=holder,
        termination_reason=episode.termination_reason.value,
        reward_info=episode.reward_info.model_dump(mode="json"),
        # The NL judge's calls, when it judged (metered by the engine's scoring).
        fields={**ENDED, **judge_fields(run_id=run.pk, usage=episode.judge_usage)},
    )


def play_say(*, run: Run, text: str) -> RunEvent:
    """Store the player's message to the customer and queue the customer's reply."""
    text = (text or "").strip()
    if not text:
        raise ValidationError({"text": "Write something to the customer."})
    if episodes.AGENT_STOP in text:
        raise ValidationError({"text": "To end the conversation, use “End conversation”."})
    holder = _holder()
    count = _take(run=run, to=Phase.CUSTOMER, allowed=(Phase.YOUR_TURN,), holder=holder)
    message = episodes.AssistantMessage(role="assistant", content=text)
    message.turn_idx = count
    try:
        (event,) = events_publish(
            run=run, messages=[message.model_dump(mode="json")], worker=holder
        )
        # Queued for a worker: nobody holds it until one claims it.
        Run.objects.filter(pk=run.pk, worker=holder).update(worker="")
    except Exception:
        play_release(run_id=run.pk, holder=holder, to=Phase.YOUR_TURN)
        raise
    _queue_customer(run.pk, at=count + 1)
    return event


def play_tool(*, run: Run, name: str, arguments: Any) -> list[RunEvent]:
    """Call the agent's tool ``name`` here and store the call and its result.

    Raises :class:`ArgumentsInvalid` (nothing stored) when the arguments do not fit the
    tool's schema, :class:`PlayRefused` when it is not the player's turn. A tool that
    fails on valid-looking arguments answers with a tool error, as τ² does, and the
    conversation goes on. If the call reaches τ²'s step or error limit, scoring is queued
    (on a worker: scoring may call the judge).
    """
    schema = selectors.tool_schema(
        domain=run.domain, name=name, retrieval_config=run.retrieval_config
    )
    if schema is None:
        raise ArgumentsInvalid({"name": f"{run.domain} has no tool {name!r}."})
    errors = schemas.argument_errors(schema, arguments)
    if errors:
        raise ArgumentsInvalid(errors)
    refused = budgets.embedding_refusal(run=run)  # a search embeds on a budgeted connection
    if refused is not None:
        raise PlayRefused(refused)
    holder = _holder()
    _take(run=run, to=Phase.TOOL, allowed=(Phase.YOUR_TURN,), holder=holder)
    try:
        episode = play_episode(run=run, route=play_route(run), score_on_end=False)
        before = len(episode.messages)
        try:
            episode.call_tool(name, arguments)
        finally:
            play_embeddings_count(run=run, episode=episode)
        events = events_publish(run=run, messages=episode.messages_json(before), worker=holder)
    except embeddings.EmbeddingsError as exc:
        # Nothing stored: the player may search again once the endpoint answers.
        play_release(run_id=run.pk, holder=holder, to=Phase.YOUR_TURN)
        raise PlayRefused(f"The search could not be made: {exc}") from None
    except BaseException:
        play_release(run_id=run.pk, holder=holder, to=Phase.YOUR_TURN)
        raise
    if episode.done:  # τ²'s limits end the conversation; score it on a worker
        count = before + len(events)
        Run.objects.filter(pk=run.pk, worker=holder).update(
            play_phase=Phase.SCORING,
            worker="",
            lease_expires_at=timezone.now() + pending_lease(),
            termination_reason=episode.termination_reason.value,
        )
        _queue_score(run.pk, at=count)
        status_publish(run_id=run.pk)
    else:
        play_release(run_id=run.pk, holder=holder, to=Phase.YOUR_TURN)
    return events


def play_end(*, run: Run) -> None:
    """End the conversation (τ²'s agent stop) and queue its scoring."""
    count = _take(run=run, to=Phase.SCORING, allowed=(Phase.YOUR_TURN, Phase.NEEDS_SCORING))
    status_publish(run_id=run.pk)
    _queue_score(run.pk, at=count)


def play_retry(*, run: Run) -> None:
    """Ask the customer again (their turn failed or was lost), or score again."""
    with transaction.atomic():
        phase = selectors.play_state(run=Run.objects.select_for_update().get(pk=run.pk)).phase
    if phase == Phase.NEEDS_SCORING:
        play_end(run=run)
        return
    count = _take(run=run, to=Phase.CUSTOMER, allowed=(Phase.NEEDS_CUSTOMER,))
    status_publish(run_id=run.pk)
    _queue_customer(run.pk, at=count)


def play_route(run: Run) -> gateway.Route:
    """The customer's route of a play session: the router on the player's own token, or
    the connection it runs on. Raises ``SignInRequired`` or ``ConnectionUnavailable``."""
    return route_for(connection=run.user_connection, model=run.user_model, user=run.created_by)


def play_embeddings_count(*, run: Run, episode: episodes.Episode) -> None:
    """Add what ``episode`` (one rebuild of the session) embedded to the run's embeddings
    columns: tokens, and their cost at the embeddings model's price (unpriced: the tokens
    only, the cost left unknown)."""
    fields = embedding_fields(run=run, usage=episode.embedding_usage)
    if not fields:
        return
    added = fields["embedding_cost_usd"]
    Run.objects.filter(pk=run.pk).update(
        embedding_prompt_tokens=F("embedding_prompt_tokens") + fields["embedding_prompt_tokens"],
        embedding_cost_usd=None
        if added is None
        else Coalesce(F("embedding_cost_usd"), Value(Decimal(0))) + added,
    )


def play_episode(*, run: Run, route: gateway.Route, score_on_end: bool = True) -> episodes.Episode:
    """τ²'s episode of the session, rebuilt from its stored events (its embeddings, an
    embedding configuration's, on its connection model: the knowledge base read from the
    cache after the first build).

    With ``score_on_end`` off, an action that ends the conversation (τ²'s limits) leaves
    it unscored, so a tool call in a web request never scores there: scoring may call
    the judge, which belongs on a worker.
    """
    messages = list(run.events.order_by("seq").values_list("message", flat=True))
    embedder = None
    if run.embedding_model:
        embedder = route_for(
            connection=run.embedding_connection, model=run.embedding_model, user=run.created_by
        )
    return episodes.Episode(
        domain=run.domain,
        task_id=run.task.task_id,
        user_llm=route,
        user_llm_args=run.user_llm_args,
        messages=messages,
        termination_reason=run.termination_reason or None,
        max_steps=run.max_steps,
        score_on_end=score_on_end,
        retrieval_config=run.retrieval_config or None,
        embedding_llm=embedder,
    )


def _holder() -> str:
    """A plain id for the web request working on a session."""
    return execution_id("web:")


def _queue_customer(run_id: int, *, at: int) -> None:
    queue.enqueue(queue.PLAY_CUSTOMER_TURN, run_id, at)


def _queue_score(run_id: int, *, at: int) -> None:
    queue.enqueue(queue.PLAY_SCORE, run_id, at)

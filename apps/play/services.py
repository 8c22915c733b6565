"""Writes of play sessions: start, say, call a tool, end, ask again.

A session is a ``Run`` of kind ``human``; its conversation is its stored events, so any
web process or worker continues it by rebuilding τ²'s episode from them. One action at
a time: an action first takes the session with one conditional UPDATE (a marker in
``worker``, see :mod:`apps.play.selectors`), and is refused while another holds it.
Whatever needs the customer's or the judge's LLM runs on a Celery worker with the
player's own token; tool calls run here, in the request.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.play import schemas, selectors
from apps.play.selectors import Phase
from apps.runs.events import events_publish, status_publish
from apps.runs.models import Run, RunEvent
from apps.runs.services import run_provenance
from apps.tasks.models import Task
from tau2_env import config, engine, llm

HUMAN_AGENT = "human"


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


def _provenance(*, task: Task, user_model: str, max_steps: int, seed: int | None) -> dict:
    return run_provenance(
        task=task,
        agent={"implementation": "a person (apps.play)", "model": HUMAN_AGENT},
        user_model=user_model,
        max_steps=max_steps,
        seed=seed,
        agent_prices=None,
    )


def play_task_pick(*, domain: str, split: str, seed: int | None) -> Task:
    """A task of ``split`` as the OpenEnv face picks it (same seed, same task)."""
    try:
        task_id = engine.pick_task_id(domain=domain, split=split, seed=seed)
    except KeyError as exc:
        raise ValidationError({"split": str(exc.args[0])}) from None
    task = Task.objects.filter(domain_id=domain, task_id=task_id).first()
    if task is None:
        raise ValidationError({"task_id": f"No task {task_id!r} in {domain}."})
    return task


def play_start(*, user, task: Task, seed: int | None = None) -> Run:
    """Open a session of ``task`` for ``user`` and queue the customer's opening message.

    Raises ``SignInRequired`` (from the vault) when ``user`` has no usable token, before
    anything is stored.
    """
    from apps.accounts.vault import hf_token_for

    hf_token_for(user=user)  # fail here, with the vault's message, not later on a worker
    user_model = config.provider_settings().model
    max_steps = min(engine.DEFAULT_MAX_STEPS, settings.TAU2_RUN_MAX_STEPS)
    nonce = uuid.uuid4().hex
    now = timezone.now()
    with transaction.atomic():
        run = Run.objects.create(
            kind=Run.Kind.HUMAN,
            task=task,
            domain=task.domain_id,
            created_by=user,
            agent_model=HUMAN_AGENT,
            user_model=user_model,
            max_steps=max_steps,
            seed=seed,
            status=Run.Status.RUNNING,
            started_at=now,
            worker=selectors.CUSTOMER + nonce,
            lease_expires_at=now + pending_lease(),
            provenance=_provenance(
                task=task, user_model=user_model, max_steps=max_steps, seed=seed
            ),
        )
        _queue_customer(run.pk, nonce)
    return run


def _take(*, run: Run, prefix: str, lease: timedelta, allowed: tuple[Phase, ...]) -> str:
    """Hold the session for one action; returns the marker. Raises :class:`PlayRefused`.

    The row is locked while the phase is read, so of two actions at once one wins and
    the other is refused.
    """
    refusal = ""
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
            marker = prefix + uuid.uuid4().hex
            Run.objects.filter(pk=run.pk).update(
                worker=marker, lease_expires_at=timezone.now() + lease, error=""
            )
    if refusal:
        raise PlayRefused(refusal)
    return marker


def _stop(run: Run) -> None:
    Run.objects.filter(pk=run.pk).exclude(status__in=Run.FINAL).update(
        status=Run.Status.STOPPED,
        termination_reason="stopped",
        finished_at=timezone.now(),
        worker="",
        lease_expires_at=None,
    )
    transaction.on_commit(lambda: status_publish(run_id=run.pk))


def play_release(*, run_id: int, marker: str, error: str = "", **fields: Any) -> bool:
    """Let go of the session if ``marker`` (or its claim) still holds it; tell the browsers."""
    released = (
        Run.objects.filter(pk=run_id, status=Run.Status.RUNNING)
        .filter(Q(worker=marker) | Q(worker__startswith=marker + "@"))
        .update(worker="", lease_expires_at=None, error=error, **fields)
    )
    status_publish(run_id=run_id)
    return bool(released)


def play_say(*, run: Run, text: str) -> RunEvent:
    """Store the player's message to the customer and queue the customer's reply."""
    text = (text or "").strip()
    if not text:
        raise ValidationError({"text": "Write something to the customer."})
    if engine.AGENT_STOP in text:
        raise ValidationError({"text": "To end the conversation, use “End conversation”."})
    marker = _take(
        run=run, prefix=selectors.CUSTOMER, lease=pending_lease(), allowed=(Phase.YOUR_TURN,)
    )
    message = engine.AssistantMessage(role="assistant", content=text)
    message.turn_idx = Run.objects.values_list("n_messages", flat=True).get(pk=run.pk)
    try:
        (event,) = events_publish(
            run=run, messages=[message.model_dump(mode="json")], worker=marker
        )
    except Exception:
        play_release(run_id=run.pk, marker=marker)
        raise
    _queue_customer(run.pk, marker.removeprefix(selectors.CUSTOMER))
    return event


def play_tool(*, run: Run, name: str, arguments: Any) -> list[RunEvent]:
    """Call the agent's tool ``name`` here and store the call and its result.

    Raises :class:`ArgumentsInvalid` (nothing stored) when the arguments do not fit the
    tool's schema, :class:`PlayRefused` when it is not the player's turn. A tool that
    fails on valid-looking arguments answers with a tool error, as τ² does, and the
    conversation goes on. If the call reaches τ²'s step or error limit, scoring is queued.
    """
    schema = selectors.tool_schema(domain=run.domain, name=name)
    if schema is None:
        raise ArgumentsInvalid({"name": f"{run.domain} has no tool {name!r}."})
    errors = schemas.argument_errors(schema, arguments)
    if errors:
        raise ArgumentsInvalid(errors)
    marker = _take(run=run, prefix=selectors.TOOL, lease=_tool_lease(), allowed=(Phase.YOUR_TURN,))
    try:
        episode = play_episode(run=run, token=_token(run), unlimited=True)
        before = len(episode.messages)
        episode.call_tool(name, arguments)
        new = engine.messages_to_json(episode.messages[before:])
        events = events_publish(run=run, messages=new, worker=marker)
    except BaseException:
        play_release(run_id=run.pk, marker=marker)
        raise
    reason = limit_reason(episode=episode, run=run)
    if reason:  # τ²'s limits end the conversation; score it on a worker
        Run.objects.filter(pk=run.pk, worker=marker).update(
            worker=selectors.SCORE + marker.removeprefix(selectors.TOOL),
            lease_expires_at=timezone.now() + pending_lease(),
            termination_reason=reason,
        )
        _queue_score(run.pk, marker.removeprefix(selectors.TOOL))
        status_publish(run_id=run.pk)
    else:
        play_release(run_id=run.pk, marker=marker)
    return events


def play_end(*, run: Run) -> None:
    """End the conversation (τ²'s agent stop) and queue its scoring."""
    marker = _take(
        run=run,
        prefix=selectors.SCORE,
        lease=pending_lease(),
        allowed=(Phase.YOUR_TURN, Phase.NEEDS_SCORING),
    )
    status_publish(run_id=run.pk)
    _queue_score(run.pk, marker.removeprefix(selectors.SCORE))


def play_retry(*, run: Run) -> None:
    """Ask the customer again (their turn failed or was lost), or score again."""
    with transaction.atomic():
        phase = selectors.play_state(run=Run.objects.select_for_update().get(pk=run.pk)).phase
    if phase == Phase.NEEDS_SCORING:
        play_end(run=run)
        return
    marker = _take(
        run=run, prefix=selectors.CUSTOMER, lease=pending_lease(), allowed=(Phase.NEEDS_CUSTOMER,)
    )
    status_publish(run_id=run.pk)
    _queue_customer(run.pk, marker.removeprefix(selectors.CUSTOMER))


def limit_reason(*, episode: engine.Episode, run: Run) -> str:
    """τ²'s limit the conversation has reached (``max_steps``, ``too_many_errors``) or ""."""
    if episode.step_count >= run.max_steps:
        return engine.TerminationReason.MAX_STEPS.value
    if episode.num_errors >= engine.DEFAULT_MAX_ERRORS:
        return engine.TerminationReason.TOO_MANY_ERRORS.value
    return ""


def play_episode(
    *, run: Run, token: str, messages: list | None = None, unlimited: bool = False
) -> engine.Episode:
    """τ²'s episode of the session, rebuilt from its stored events (or ``messages``).

    With ``unlimited`` τ²'s limits are not applied in the episode (the caller checks them
    with :func:`limit_reason`), so a tool call in a web request never ends and scores
    the conversation there: scoring may call the judge, which belongs on a worker.
    """
    if messages is None:
        messages = list(run.events.order_by("seq").values_list("message", flat=True))
    route = llm.Route(
        provider="hf",
        model=run.user_model,
        base_url=config.hf_router_url(),
        api_key=token,
        timeout=config.llm_timeout(),
    )
    limits = (
        {"max_steps": 10**9, "max_errors": 10**9} if unlimited else {"max_steps": run.max_steps}
    )
    return engine.Episode(
        domain=run.domain,
        task_id=run.task.task_id,
        user_llm=route,
        messages=messages,
        termination_reason=run.termination_reason or None,
        **limits,
    )


def _token(run: Run) -> str:
    from apps.accounts.vault import hf_token_for

    return hf_token_for(user=run.created_by)


def _queue_customer(run_id: int, nonce: str) -> None:
    from apps.play.tasks import customer_turn

    transaction.on_commit(lambda: customer_turn.delay(run_id, nonce))


def _queue_score(run_id: int, nonce: str) -> None:
    from apps.play.tasks import score

    transaction.on_commit(lambda: score.delay(run_id, nonce))

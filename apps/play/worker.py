"""The worker side of a play session: the customer's turn and the scoring.

Both run on a Celery worker with the player's own token (from the vault), rebuild τ²'s
episode from the stored events, and store what it adds in one write. Each first claims
the session's marker with one UPDATE, so a duplicated or redelivered task does nothing;
a task whose claim was taken over (its lease ran out) stores nothing.

A failure of the customer's or the judge's LLM does not end the session: nothing of
the turn is stored, the reason is shown to the player, who may ask again.
"""

from __future__ import annotations

import logging

from django.db.models import Q
from django.utils import timezone

from apps.play import selectors, services
from apps.runs.events import LostRun, events_publish
from apps.runs.models import Run
from apps.runs.runner import run_finish
from tau2_env import engine, llm

logger = logging.getLogger(__name__)


def _claim(*, run_id: int, marker: str, execution: str) -> tuple[Run, str] | None:
    """Claim ``marker`` for this execution; ``None`` if it is gone or held by a live one."""
    now = timezone.now()
    claimed_by = f"{marker}@{execution}"
    claimed = (
        Run.objects.filter(pk=run_id, kind=Run.Kind.HUMAN, status=Run.Status.RUNNING)
        .filter(Q(worker=marker) | Q(worker__startswith=marker + "@", lease_expires_at__lt=now))
        .update(worker=claimed_by, lease_expires_at=now + services.pending_lease())
    )
    if not claimed:
        return None
    return Run.objects.select_related("task", "created_by").get(pk=run_id), claimed_by


def _token_or_release(run: Run, holder: str) -> str | None:
    from apps.accounts.vault import SignInRequired, hf_token_for

    try:
        return hf_token_for(user=run.created_by)
    except SignInRequired as exc:
        services.play_release(run_id=run.pk, marker=holder, error=str(exc))
        return None


def customer_turn(*, run_id: int, nonce: str, execution: str) -> str:
    """The customer answers the player's last message (or opens the conversation).

    Returns ``answered``, ``ended`` (the customer stopped, or τ²'s limits were reached,
    and the run was scored), ``failed`` (nothing stored; the player may ask again) or
    ``skipped`` (another execution holds the turn).
    """
    claim = _claim(run_id=run_id, marker=selectors.CUSTOMER + nonce, execution=execution)
    if claim is None:
        return "skipped"
    run, holder = claim
    token = _token_or_release(run, holder)
    if token is None:
        return "failed"
    try:
        stored = list(run.events.order_by("seq").values_list("message", flat=True))
        if len(stored) <= 1:  # nothing yet, or only the greeting of a start that failed
            episode = services.play_episode(run=run, token=token, messages=[])
            episode.start()
        else:  # the player's message is stored: the rebuilt episode hears it again
            episode = services.play_episode(run=run, token=token, messages=stored[:-1])
            episode.say(stored[-1]["content"])
        if episode.termination_reason == engine.TerminationReason.USER_ERROR:
            services.play_release(run_id=run.pk, marker=holder, error=episode.error or "")
            return "failed"
        new = engine.messages_to_json(episode.messages[len(stored) :])
        events_publish(run=run, messages=new, worker=holder)
        return _settle(run=run, holder=holder, episode=episode, ended="ended", open_="answered")
    except LostRun:
        return "skipped"
    except Exception as exc:  # a bug, not a provider error: let the player ask again
        logger.exception("The customer's turn of play session %s failed", run.pk)
        reason = llm.redact(f"Internal error: {type(exc).__name__}: {exc}", token)[:1000]
        services.play_release(run_id=run.pk, marker=holder, error=reason)
        return "failed"


def score(*, run_id: int, nonce: str, execution: str) -> str:
    """End the conversation (τ²'s agent stop, unless it already ended) and score it.

    Returns ``ended``, ``failed`` (nothing stored; the player may end again) or ``skipped``.
    """
    claim = _claim(run_id=run_id, marker=selectors.SCORE + nonce, execution=execution)
    if claim is None:
        return "skipped"
    run, holder = claim
    token = _token_or_release(run, holder)
    if token is None:
        return "failed"
    try:
        episode = services.play_episode(run=run, token=token)
        before = len(episode.messages)
        if episode.done:  # the customer stopped, or a limit was reached: score as it is
            try:
                episode.reward_info = episode.evaluate()
            except Exception as exc:
                episode.error = (
                    f"The conversation could not be scored: {engine._reason(exc, episode.user_llm)}"
                )
        else:
            episode.finish()
        if episode.reward_info is None:
            services.play_release(run_id=run.pk, marker=holder, error=episode.error or "")
            return "failed"
        events_publish(
            run=run, messages=engine.messages_to_json(episode.messages[before:]), worker=holder
        )
        return _settle(run=run, holder=holder, episode=episode, ended="ended", open_="failed")
    except LostRun:
        return "skipped"
    except Exception as exc:
        logger.exception("Scoring play session %s failed", run.pk)
        reason = llm.redact(f"Internal error: {type(exc).__name__}: {exc}", token)[:1000]
        services.play_release(run_id=run.pk, marker=holder, error=reason)
        return "failed"


def _settle(*, run: Run, holder: str, episode, ended: str, open_: str) -> str:
    """Complete the run if the episode ended with a verdict; else let go of it."""
    if not episode.done:
        services.play_release(run_id=run.pk, marker=holder)
        return open_
    reason = engine.TerminationReason(episode.termination_reason).value
    if episode.reward_info is None:  # ended, but scoring failed: the player may retry it
        services.play_release(
            run_id=run.pk, marker=holder, error=episode.error or "", termination_reason=reason
        )
        return "failed"
    run_finish(
        run=run,
        status=Run.Status.COMPLETED,
        worker=holder,
        termination_reason=reason,
        reward_info=episode.reward_info.model_dump(mode="json"),
    )
    return ended

"""The worker side of a play session: the customer's turn and the scoring.

Both run on a Celery worker on the customer's route (the player's own token, or the
connection the customer runs on), rebuild τ²'s
episode from the stored events, and store what it adds in one write. Each first claims
the session's queued work (:func:`apps.play.services.play_claim`), so a duplicated or
redelivered task does nothing; a task whose claim was taken over (its lease ran out)
stores nothing.

A failure of the customer's or the judge's LLM does not end the session: nothing of
the turn is stored, the reason is shown to the player, who may ask again. So does a
customer on a budgeted connection whose month is spent (or whose model has no price
there): the turn is not asked for, and asking again works once there is room.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager

from apps.accounts.vault import SignInRequired
from apps.connections.llm_routes import ConnectionUnavailable
from apps.play import services
from apps.play.selectors import Phase
from apps.runs.budgets import play_turn_refusal
from apps.runs.events import LostRun, UnstorableMessage, call_publish, events_publish
from apps.runs.lifecycle import run_finish
from apps.runs.models import Run
from tau2_env.engine import episodes
from tau2_env.llm import gateway

logger = logging.getLogger(__name__)


def _route_or_release(run: Run, holder: str, back_to: Phase) -> gateway.Route | None:
    try:
        return services.play_route(run)
    except (SignInRequired, ConnectionUnavailable) as exc:
        services.play_release(run_id=run.pk, holder=holder, to=back_to, error=str(exc))
        return None


def _calls_told(run: Run) -> AbstractContextManager[None]:
    """Within the block, the session's LLM calls (the customer's, the judge's) are told to
    its page as they wait and retry, as a run's are (``apps.runs.events.call_publish``)."""
    return gateway.observe_calls(lambda notice: call_publish(run_id=run.pk, notice=notice))


def customer_turn(*, run_id: int, at: int, worker: str) -> str:
    """The customer answers the player's last message (or opens the conversation).

    Returns ``answered``, ``ended`` (the customer stopped, or τ²'s limits were reached,
    and the run was scored), ``failed`` (nothing stored; the player may ask again) or
    ``skipped`` (nothing to do, or another worker holds the turn).
    """
    run = services.play_claim(run_id=run_id, phase=Phase.CUSTOMER, at=at, worker=worker)
    if run is None:
        return "skipped"
    refused = play_turn_refusal(run=run)  # a budgeted connection's month, checked first
    if refused is not None:
        services.play_release(run_id=run.pk, holder=worker, to=Phase.NEEDS_CUSTOMER, error=refused)
        return "failed"
    route = _route_or_release(run, worker, Phase.NEEDS_CUSTOMER)
    if route is None:
        return "failed"
    try:
        episode = services.play_episode(run=run, route=route)
        before = run.n_messages
        with _calls_told(run):
            episode.customer_turn()
        services.play_embeddings_count(run=run, episode=episode)
        if episode.termination_reason == episodes.TerminationReason.USER_ERROR:
            services.play_release(
                run_id=run.pk, holder=worker, to=Phase.NEEDS_CUSTOMER, error=episode.error or ""
            )
            return "failed"
        events_publish(run=run, messages=episode.messages_json(before), worker=worker)
        return _settle(run=run, worker=worker, episode=episode, open_="answered")
    except LostRun:
        return "skipped"
    except UnstorableMessage as exc:  # the customer's reply held a NUL: the session ends
        failed, failure = Run.Status.FAILED, Run.Failure.PROVIDER
        run_finish(
            run=run,
            status=failed,
            worker=worker,
            error=str(exc),
            failure=failure,
            fields=services.ENDED,
        )
        return "failed"
    except Exception as exc:  # a bug, not a provider error: let the player ask again
        logger.exception("The customer's turn of play session %s failed", run.pk)
        reason = gateway.explain_error(exc, secrets=route.secrets()).message
        services.play_release(run_id=run.pk, holder=worker, to=Phase.NEEDS_CUSTOMER, error=reason)
        return "failed"


def score(*, run_id: int, at: int, worker: str) -> str:
    """End the conversation (τ²'s agent stop, unless it already ended) and score it.

    Returns ``ended``, ``failed`` (nothing stored; the player may end again) or ``skipped``.
    """
    run = services.play_claim(run_id=run_id, phase=Phase.SCORING, at=at, worker=worker)
    if run is None:
        return "skipped"
    route = _route_or_release(run, worker, Phase.NEEDS_SCORING)
    if route is None:
        return "failed"
    try:
        episode = services.play_episode(run=run, route=route)
        before = run.n_messages
        with _calls_told(run):
            episode.finish()  # τ²'s stop if still open; then τ²'s evaluator
        services.play_embeddings_count(run=run, episode=episode)
        if episode.reward_info is None:
            services.play_release(
                run_id=run.pk, holder=worker, to=Phase.NEEDS_SCORING, error=episode.error or ""
            )
            return "failed"
        events_publish(run=run, messages=episode.messages_json(before), worker=worker)
        return _settle(run=run, worker=worker, episode=episode, open_="failed")
    except LostRun:
        return "skipped"
    except Exception as exc:
        logger.exception("Scoring play session %s failed", run.pk)
        reason = gateway.explain_error(exc, secrets=route.secrets()).message
        services.play_release(run_id=run.pk, holder=worker, to=Phase.NEEDS_SCORING, error=reason)
        return "failed"


def _settle(*, run: Run, worker: str, episode: episodes.Episode, open_: str) -> str:
    """Complete the run if the episode ended with a verdict; else move it on."""
    if not episode.done:
        services.play_release(run_id=run.pk, holder=worker, to=Phase.YOUR_TURN)
        return open_
    if episode.reward_info is None:  # ended, but scoring failed: the player may retry it
        services.play_release(
            run_id=run.pk,
            holder=worker,
            to=Phase.NEEDS_SCORING,
            error=episode.error or "",
            termination_reason=episode.termination_reason.value,
        )
        return "failed"
    services.play_complete(run=run, holder=worker, episode=episode)
    return "ended"

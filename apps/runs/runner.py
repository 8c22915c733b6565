"""The worker side of a model run: τ²'s own agent against the simulated customer.

:func:`run_execute` claims a run atomically, builds τ²'s ``Orchestrator`` with τ²'s
``LLMAgent`` (the agent ``tau2 run`` and the leaderboard use) and the engine's customer
(or, in an ablation, τ²'s agent and user of the run's ``mode``: ``engine.Episode``),
and drives it hop by hop on the starter's token. After every hop the new messages are
stored and published (``apps.runs.events``); between hops a stop request is honoured.
At the end τ²'s evaluator scores the conversation.

A run on a connection with a monthly budget (``apps.runs.budgets``) is admitted before
its first hop, or fails at once with ``Run.Failure.BUDGET`` and the numbers; between
hops it stops the same way once the budget is reached, its messages kept. Nothing of
this changes what is sent to a model or how τ² scores.

This module is one driver of runs; their life — claim, lease and heartbeat, hand back,
finish, reap — is ``apps.runs.lifecycle``'s, shared with play sessions and agent
episodes. If the worker dies (even ``kill -9``) the lease runs out and the reaper hands
the run to another worker, which rebuilds the conversation from the stored events and
goes on. A lost database or broker hands the run back and its Celery task tries again.
"""

from __future__ import annotations

import dataclasses
import logging
import random

from django.conf import settings
from django.db import close_old_connections

from apps.accounts.vault import SignInRequired
from apps.connections.llm_routes import ConnectionUnavailable, route_for
from apps.runs import budgets
from apps.runs.events import (
    LostRun,
    UnstorableMessage,
    call_publish,
    embedding_fields,
    events_publish,
    judge_fields,
)
from apps.runs.lifecycle import (
    INFRASTRUCTURE_ERRORS,
    RETRY,
    WAIT,
    Heartbeat,
    WaitForOwnEndpoint,
    infrastructure_reason,
    run_claim,
    run_finish,
    run_hand_back,
    run_status,
)
from apps.runs.models import Run
from tau2_env.engine import episodes
from tau2_env.llm import embeddings, gateway, outbound

logger = logging.getLogger(__name__)


def run_execute(*, run_id: int, worker: str) -> str:
    """Claim and drive one model run to its end. Returns the run's status afterwards.

    Never raises for a provider or conversation error: those end the run as failed with
    a readable reason. Returns without touching the run if another worker holds it, and
    :data:`RETRY` (the run queued again, or never claimed) when the database or the
    broker was lost.
    """
    try:
        run = run_claim(run_id=run_id, worker=worker)
        if run is None:
            return run_status(run_id)
    except WaitForOwnEndpoint as exc:  # its person's other runs there first
        logger.info("Run %s waits: %s", run_id, exc)
        return WAIT
    except INFRASTRUCTURE_ERRORS as exc:  # nothing claimed, nothing to hand back
        logger.warning("Run %s: could not claim it (%s); trying again later", run_id, exc)
        close_old_connections()
        return RETRY
    try:
        routes = run_routes(run)
        refused = budgets.run_admit(run=run)
    except (SignInRequired, ConnectionUnavailable) as exc:
        run_finish(run=run, status=Run.Status.FAILED, worker=worker, error=str(exc))
        return Run.Status.FAILED
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("Run %s lost its database before it started (%s)", run.pk, exc)
        return run_hand_back(run=run, worker=worker, reason=infrastructure_reason(exc))
    if refused is not None:
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=refused,
            failure=Run.Failure.BUDGET,
            # Not a message was exchanged: it never started (a retried run keeps its start).
            fields={"started_at": None} if not run.n_messages else None,
        )
        return Run.Status.FAILED

    try:
        with Heartbeat(run_id=run.pk, worker=worker) as heartbeat:
            return _drive(run=run, worker=worker, routes=routes, heartbeat=heartbeat)
    except LostRun:
        logger.info("Run %s was taken over or stopped; %s lets go", run.pk, worker)
        return run_status(run.pk)
    except UnstorableMessage as exc:  # a provider's reply with a NUL: said as such
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=str(exc),
            failure=Run.Failure.PROVIDER,
        )
        return Run.Status.FAILED
    except INFRASTRUCTURE_ERRORS as exc:
        # The database or the broker went away (a restart, a failover): not the run's
        # fault. Hand it back to be resumed from its stored messages.
        logger.warning("Run %s lost its database or broker (%s); handing it back", run.pk, exc)
        return run_hand_back(run=run, worker=worker, reason=infrastructure_reason(exc))
    except Exception as exc:  # a bug, not a provider error: still never a stuck "running"
        logger.exception("Run %s failed in the worker", run.pk)
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=gateway.explain_error(
                exc, secrets=tuple(secret for r in routes if r for secret in r.secrets())
            ).message,
            failure=Run.Failure.INFRASTRUCTURE,
        )
        return Run.Status.FAILED


Routes = tuple[gateway.Route, gateway.Route, gateway.Route | None, gateway.Route | None]


def run_routes(run: Run) -> Routes:
    """The (agent, customer, judge, embedder) routes of a model run, on its starter's
    credentials: their own Hugging Face token for the router, or the connection a side
    names; the judge ``None`` when it is the customer's, the embedder ``None`` when the
    run embeds nothing. Raises ``SignInRequired`` or ``ConnectionUnavailable`` with a
    message for the person."""
    agent = route_for(connection=run.agent_connection, model=run.agent_model, user=run.created_by)
    customer = route_for(connection=run.user_connection, model=run.user_model, user=run.created_by)
    judge = embedder = None
    if run.judge_model:
        judge = route_for(
            connection=run.judge_connection, model=run.judge_model, user=run.created_by
        )
    if run.embedding_model:
        embedder = route_for(
            connection=run.embedding_connection, model=run.embedding_model, user=run.created_by
        )
    return agent, customer, judge, embedder


def _drive(
    *,
    run: Run,
    worker: str,
    routes: Routes,
    heartbeat: Heartbeat,
) -> str:
    """τ²'s ``LLMAgent`` against the customer through the engine's one driver; this side
    only stores and publishes each hop, and honours Stop between hops."""
    stored = list(run.events.order_by("seq").values_list("message", flat=True))
    # Rebuilds a stored conversation (τ²'s orchestrator replays it and works out whose
    # turn it is) or opens a new one with τ²'s greeting. An embedding configuration
    # embeds the knowledge base here (the first run on its connection model pays for it).
    try:
        episode = episodes.Episode(
            domain=run.domain,
            task_id=run.task.task_id,
            user_llm=routes[1],
            agent_llm=routes[0],
            judge_llm=routes[2],
            embedding_llm=routes[3],
            agent_llm_args=run.agent_llm_args,
            user_llm_args=run.user_llm_args,
            messages=stored,
            max_steps=run.max_steps,
            max_errors=run.max_errors,
            seed=run.seed,
            mode=run.mode,  # τ²'s agent (and customer) of the run's ablation, if any
            retrieval_config=run.retrieval_config or None,
            # `tau2 run --timeout`: the clock of a conversation resumed (another worker, a
            # retry) runs from when the run first started, not from this worker's pick-up.
            timeout=run.timeout,
            elapsed=(run.elapsed_seconds or 0.0) if stored else 0.0,
        )
    except embeddings.EmbeddingsError as exc:
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=f"The knowledge base could not be embedded: {exc}",
            failure=_failure_kind(exc),
        )
        return Run.Status.FAILED
    embedded = [gateway.Usage()]  # the embeddings' tokens last written

    def count_embeddings() -> None:
        """Write the embeddings' tokens and cost when they grew: spend a budget sees."""
        if episode.embedding_usage != embedded[0]:
            embedded[0] = episode.embedding_usage
            fields = embedding_fields(run=run, usage=embedded[0])
            Run.objects.filter(pk=run.pk).update(**fields)

    count_embeddings()
    prices = run.agent_prices
    # The greeting of a new conversation (a No-User one has none: its agent speaks first,
    # in the first hop of run()).
    if len(episode.messages) > len(stored):
        events_publish(
            run=run,
            messages=episode.messages_json(len(stored)),
            agent_prices=prices,
            worker=worker,
        )

    def on_hop(hop: episodes.Hop) -> None:
        count_embeddings()
        events_publish(
            run=run,
            messages=hop.messages,
            latency_ms=int(hop.seconds * 1000),
            attempts=[a.as_json() for a in hop.attempts] if len(hop.attempts) > 1 else None,
            agent_prices=prices,
            worker=worker,
        )

    over_budget: list[str] = []  # why the run stopped, when its budget was reached

    def should_stop() -> bool:
        if heartbeat.lost:
            raise LostRun(f"lease of run {run.pk} lost")
        if Run.objects.filter(pk=run.pk, stop_requested=True).exists():
            return True
        reached = budgets.budget_reached(run=run)
        if reached is not None:
            over_budget.append(reached)
            return True
        return False

    last_failed: list[gateway.CallNotice] = []  # the last call that failed, for its turn

    # Stop ends a model call in flight within seconds, not after its timeout.
    def on_call(notice: gateway.CallNotice) -> None:
        if notice.phase == "failed":
            last_failed[:] = [notice]
        call_publish(run_id=run.pk, notice=notice)

    def backoff(exc: gateway.LLMCallError, attempt: int) -> float | None:
        """The worker's wait before trying a failed turn again, told to the page."""
        wait = _backoff(exc, attempt)
        if wait is not None and last_failed:
            failed = last_failed[0]
            call_publish(
                run_id=run.pk,
                notice=dataclasses.replace(
                    failed,
                    phase="again",
                    attempt=attempt + 1,
                    attempts=settings.TAU2_RUN_TRANSIENT_RETRIES + 1,
                    wait=wait,
                ),
            )
        return wait

    with outbound.interruptible(heartbeat.stopped), gateway.observe_calls(on_call):
        outcome = episode.run(on_hop=on_hop, should_stop=should_stop, backoff=backoff)
    count_embeddings()  # the searches τ²'s evaluator replayed in scoring, if not cached
    reason = episode.termination_reason.value if episode.termination_reason else ""
    if outcome == "stopped" and over_budget:
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=over_budget[0],
            failure=Run.Failure.BUDGET,
        )
        return Run.Status.FAILED
    if outcome == "stopped":
        run_finish(run=run, status=Run.Status.STOPPED, worker=worker, termination_reason="stopped")
        return Run.Status.STOPPED
    if episode.reward_info is None:  # a model call failed, or scoring did
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=episode.error or "The conversation ended without a score.",
            termination_reason=reason,
            failure=_failure_kind(episode.failure),
        )
        return Run.Status.FAILED
    run_finish(
        run=run,
        status=Run.Status.COMPLETED,
        worker=worker,
        termination_reason=reason,
        reward_info=episode.reward_info.model_dump(mode="json"),
        fields=judge_fields(run_id=run.pk, usage=episode.judge_usage),
    )
    return Run.Status.COMPLETED


def _backoff(exc, attempt: int) -> float | None:
    """Seconds before trying a transiently failed hop again (exponential, with jitter),
    or ``None`` once ``TAU2_RUN_TRANSIENT_RETRIES`` attempts were spent."""
    if attempt > settings.TAU2_RUN_TRANSIENT_RETRIES:
        return None
    base = settings.TAU2_RUN_BACKOFF_SECONDS * 2 ** (attempt - 1)
    return min(base, 120.0) * random.uniform(0.5, 1.5)  # noqa: S311 - jitter


def _failure_kind(exc: BaseException | None) -> str:
    if exc is None:
        return Run.Failure.CONVERSATION
    if getattr(exc, "transient", False):
        return Run.Failure.TRANSIENT
    if getattr(exc, "status_code", None) in (401, 402, 403, 404):
        return Run.Failure.PROVIDER
    return Run.Failure.CONVERSATION

"""The worker side of a model run: τ²'s own agent against the simulated customer.

:func:`run_execute` claims a run atomically, builds τ²'s ``Orchestrator`` with τ²'s
``LLMAgent`` (the agent ``tau2 run`` and the leaderboard use) and the engine's customer,
and drives it hop by hop on the starter's token. After every hop the new messages are
stored and published (``apps.runs.events``); between hops a stop request is honoured.
At the end τ²'s evaluator scores the conversation.

A run is held under a lease that a heartbeat renews. If the worker dies (even
``kill -9``) the lease runs out and :func:`runs_reap` hands the run to another worker,
which rebuilds the conversation from the stored events and goes on. Events are written
only while the writer holds the lease, so no turn is ever recorded twice.

A lost database or broker (a restart, a failover) is the platform's fault, not the
run's: the worker hands the run back (:func:`run_hand_back`) and its Celery task tries
again; a queued run whose message the broker lost (Redis restarted without persistence)
is sent again by :func:`runs_reap`.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import DatabaseError, close_old_connections
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.runs.events import LostRun, UnstorableMessage, events_publish, status_publish
from apps.runs.models import Run

logger = logging.getLogger(__name__)

# A lost database or broker connection: a transient fault of the platform, not the run's.
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (DatabaseError,)
try:  # the broker / channel layer's client
    import redis.exceptions

    INFRASTRUCTURE_ERRORS += (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
except ImportError:  # pragma: no cover - redis is a dependency
    pass

# What run_execute returns when the run should be tried again later (its Celery task retries).
RETRY = "retry"


def execution_id(prefix: str = "") -> str:
    """A plain id for one execution holding a run (``host:pid:random``, after ``prefix``):
    a redelivered message or a second request never passes for the first holder."""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _lease() -> timedelta:
    return timedelta(seconds=settings.TAU2_RUN_LEASE_SECONDS)


def run_claim(*, run_id: int, worker: str) -> Run | None:
    """Take the run for ``worker`` if it is queued, or running under an expired lease.

    One UPDATE decides: of two workers racing for the same run, exactly one gets it.
    Returns the claimed run, or ``None`` if someone else holds it or it is over.
    """
    now = timezone.now()
    claimed = (
        Run.objects.filter(pk=run_id, kind=Run.Kind.MODEL, stop_requested=False)
        .filter(
            Q(status=Run.Status.QUEUED) | Q(status=Run.Status.RUNNING, lease_expires_at__lt=now)
        )
        .update(
            status=Run.Status.RUNNING,
            worker=worker,
            lease_expires_at=now + _lease(),
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), now),
        )
    )
    return Run.objects.select_related("task", "created_by").get(pk=run_id) if claimed else None


def run_finish(
    *,
    run: Run,
    status: str,
    worker: str | None = None,
    error: str = "",
    termination_reason: str = "",
    reward_info: dict | None = None,
    failure: str = "",
) -> bool:
    """Move a run to a final status (once). Returns False if it was already final or
    ``worker`` no longer holds it. A run of an evaluation then lets its evaluation go on
    (start the next runs, or end it)."""
    rows = Run.objects.filter(pk=run.pk).exclude(status__in=Run.FINAL)
    if worker is not None:
        rows = rows.filter(worker=worker)
    done = rows.update(
        status=status,
        failure=failure,
        error=error,
        termination_reason=termination_reason,
        reward=reward_info.get("reward") if reward_info else None,
        reward_info=reward_info,
        finished_at=timezone.now(),
        lease_expires_at=None,
        **({"play_phase": Run.PlayPhase.ENDED} if run.kind == Run.Kind.HUMAN else {}),
    )
    if done:
        status_publish(run_id=run.pk)
        if run.evaluation_id is not None:
            from apps.evaluations.services import evaluation_run_settled

            try:
                evaluation_run_settled(run_id=run.pk)
            except Exception:
                # The run's end is stored; what its evaluation does next (start the next
                # runs, complete) is done again by the next run's end and by beat's
                # dispatch. Raising here would pass for the run's own failure.
                logger.exception("Run %s ended, but its evaluation could not go on", run.pk)
    return bool(done)


class _Heartbeat:
    """Renews the run's lease while the worker holds it; notices when it is lost."""

    def __init__(self, *, run_id: int, worker: str) -> None:
        self.run_id, self.worker = run_id, worker
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run_id}", daemon=True)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        interval = max(1.0, settings.TAU2_RUN_LEASE_SECONDS / 3)
        try:
            while not self._stop.wait(interval):
                try:
                    renewed = Run.objects.filter(
                        pk=self.run_id, worker=self.worker, status=Run.Status.RUNNING
                    ).update(lease_expires_at=timezone.now() + _lease())
                except DatabaseError:  # the database restarts: try again next beat
                    logger.warning("Could not renew the lease of run %s", self.run_id)
                    close_old_connections()
                    continue
                if not renewed:
                    self.lost = True
                    return
        finally:
            close_old_connections()


def _agent_prices(run: Run) -> tuple[Decimal, Decimal] | None:
    prices = (run.provenance or {}).get("agent_prices")
    if not prices or prices[0] is None or prices[1] is None:
        return None
    return Decimal(str(prices[0])), Decimal(str(prices[1]))


def run_execute(*, run_id: int, worker: str) -> str:
    """Claim and drive one model run to its end. Returns the run's status afterwards.

    Never raises for a provider or conversation error: those end the run as failed with
    a readable reason. Returns without touching the run if another worker holds it, and
    :data:`RETRY` (the run queued again, or never claimed) when the database or the
    broker was lost.
    """
    from apps.accounts.vault import SignInRequired, hf_token_for
    from tau2_env import llm

    try:
        run = run_claim(run_id=run_id, worker=worker)
        if run is None:
            return _status(run_id)
    except INFRASTRUCTURE_ERRORS as exc:  # nothing claimed, nothing to hand back
        logger.warning("Run %s: could not claim it (%s); trying again later", run_id, exc)
        close_old_connections()
        return RETRY
    try:
        token = hf_token_for(user=run.created_by)
    except SignInRequired as exc:
        run_finish(run=run, status=Run.Status.FAILED, worker=worker, error=str(exc))
        return Run.Status.FAILED
    except INFRASTRUCTURE_ERRORS as exc:
        logger.warning("Run %s lost its database before it started (%s)", run.pk, exc)
        return run_hand_back(run=run, worker=worker)

    try:
        with _Heartbeat(run_id=run.pk, worker=worker) as heartbeat:
            return _drive(run=run, worker=worker, token=token, heartbeat=heartbeat)
    except LostRun:
        logger.info("Run %s was taken over or stopped; %s lets go", run.pk, worker)
        return _status(run.pk)
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
        return run_hand_back(run=run, worker=worker)
    except Exception as exc:  # a bug, not a provider error: still never a stuck "running"
        logger.exception("Run %s failed in the worker", run.pk)
        run_finish(
            run=run,
            status=Run.Status.FAILED,
            worker=worker,
            error=llm.explain_error(exc, secrets=(token,)).message,
            failure=Run.Failure.INFRASTRUCTURE,
        )
        return Run.Status.FAILED


def run_hand_back(*, run: Run, worker: str) -> str:
    """Queue ``run`` again after an infrastructure fault; returns :data:`RETRY` (the
    Celery task tries again later). While the database is away (a restart takes a few
    seconds) it keeps trying, for as long as the lease would have held the run; after
    that the lease has run out and the reaper re-queues the run instead."""
    deadline = time.monotonic() + settings.TAU2_RUN_LEASE_SECONDS
    pause = 0.5
    while True:
        close_old_connections()  # the broken connection goes; the next query opens one
        try:
            Run.objects.filter(pk=run.pk, worker=worker, status=Run.Status.RUNNING).update(
                status=Run.Status.QUEUED, worker="", lease_expires_at=None
            )
            break
        except DatabaseError:
            if time.monotonic() + pause > deadline:
                logger.warning("Run %s: the database is still away; the reaper takes it", run.pk)
                break
            time.sleep(pause)
            pause = min(pause * 2, 5.0)
    close_old_connections()
    return RETRY


def _status(run_id: int) -> str:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first() or "missing"


def _drive(*, run: Run, worker: str, token: str, heartbeat: _Heartbeat) -> str:
    """τ²'s ``LLMAgent`` against the customer through the engine's one driver; this side
    only stores and publishes each hop, and honours Stop between hops."""
    from tau2_env import engine, llm

    stored = list(run.events.order_by("seq").values_list("message", flat=True))
    # Rebuilds a stored conversation (τ²'s orchestrator replays it and works out whose
    # turn it is) or opens a new one with τ²'s greeting.
    args = (run.provenance or {}).get("args") or {}
    episode = engine.Episode(
        domain=run.domain,
        task_id=run.task.task_id,
        user_llm=llm.hf_route(model=run.user_model, token=token),
        agent_llm=llm.hf_route(model=run.agent_model, token=token),
        messages=stored,
        max_steps=run.max_steps,
        max_errors=args.get("max_errors") or engine.DEFAULT_MAX_ERRORS,
        seed=run.seed,
    )
    prices = _agent_prices(run)
    if len(episode.messages) > len(stored):  # the greeting of a new conversation
        events_publish(
            run=run,
            messages=episode.messages_json(len(stored)),
            agent_prices=prices,
            worker=worker,
        )

    def on_hop(hop: engine.Hop) -> None:
        events_publish(
            run=run,
            messages=hop.messages,
            latency_ms=int(hop.seconds * 1000),
            agent_prices=prices,
            worker=worker,
        )

    def should_stop() -> bool:
        if heartbeat.lost:
            raise LostRun(f"lease of run {run.pk} lost")
        return Run.objects.filter(pk=run.pk, stop_requested=True).exists()

    outcome = episode.run(on_hop=on_hop, should_stop=should_stop, backoff=_backoff)
    reason = episode.termination_reason.value if episode.termination_reason else ""
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


def runs_reap(*, now=None) -> list[int]:
    """Hand runs whose worker vanished to another worker, or fail them; send again the
    queued runs whose message was lost.

    A run still "running" after its lease expired lost its worker (crash, ``kill -9``,
    deploy); an agent run (kind ``agent``) is then stopped with the reason instead.
    Below ``TAU2_RUN_MAX_ATTEMPTS`` it is queued again, to resume from its
    stored events; beyond, it fails with the reason. A run handed to the queue more than
    a lease ago and still not claimed may have lost its message (Redis restarted without
    persistence, or it could not be sent): it is sent again, at most once per lease — a
    duplicate is harmless, only one claim wins. Returns the ids sent to the workers.
    """
    from apps.runs.tasks import execute_run

    now = now or timezone.now()
    # An agent's episode lives in the server that served it: when its lease (renewed at
    # each hop) ran out that server is gone, and the run is stopped, never re-queued.
    lost_agents = Run.objects.filter(
        kind=Run.Kind.AGENT, status=Run.Status.RUNNING, lease_expires_at__lt=now
    )
    for run in lost_agents:
        run_finish(
            run=run,
            status=Run.Status.STOPPED,
            termination_reason="stopped",
            error="The agent's session was lost (its server stopped or restarted).",
        )
    stale = Run.objects.filter(
        kind=Run.Kind.MODEL, status=Run.Status.RUNNING, lease_expires_at__lt=now
    )
    requeued = []
    for run in stale:
        if run.stop_requested:  # its worker died after Stop was pressed: just stop it
            run_finish(run=run, status=Run.Status.STOPPED, termination_reason="stopped")
        elif run.attempts >= settings.TAU2_RUN_MAX_ATTEMPTS:
            run_finish(
                run=run,
                status=Run.Status.FAILED,
                error=(
                    f"The worker running it stopped {run.attempts} times; "
                    "giving up rather than leaving it running."
                ),
                failure=Run.Failure.INFRASTRUCTURE,
            )
        else:
            execute_run.delay(run.pk)
            requeued.append(run.pk)
    cutoff = now - _lease()
    unclaimed = Run.objects.filter(
        kind=Run.Kind.MODEL,
        status=Run.Status.QUEUED,
        stop_requested=False,
        dispatched_at__lt=cutoff,
    ).values_list("pk", flat=True)
    for run_id in list(unclaimed):
        # Stamped first: the next reap leaves it alone for a lease.
        if Run.objects.filter(pk=run_id, status=Run.Status.QUEUED, dispatched_at__lt=cutoff).update(
            dispatched_at=now
        ):
            execute_run.delay(run_id)
            requeued.append(run_id)
    return requeued

"""The life of a run, whoever drives it: model runs (``apps.runs.runner``), play sessions
(``apps.play``) and agent episodes (``apps.agents``) all go through here.

* **Claim**: :func:`run_claim` takes a queued model run (or one whose lease ran out) for
  one worker with one conditional UPDATE: of two workers racing, exactly one gets it.
  Taking over an expired lease records a resumption "worker lost" (``Run.resumptions``).
* **A person's own endpoints**: a model run on a personal connection (a member's own
  server) is claimed only while its person has fewer than
  ``TAU2_OWN_ENDPOINT_RUNS_PER_PERSON`` such runs going (counted under a lock on the
  person's row); otherwise :func:`run_claim` raises :class:`WaitForOwnEndpoint` and the
  run waits in the queue, so one member's slow endpoint cannot hold every worker.
* **Lease and heartbeat**: the holder keeps the run under a lease (:func:`lease`) that
  :class:`Heartbeat` renews; events are written only while the writer holds it.
* **Hand back**: a lost database or broker is the platform's fault, not the run's;
  :func:`run_hand_back` queues the run again to resume from its stored messages, and
  records why ("database restart", "broker restart"): those never count against
  ``TAU2_RUN_MAX_ATTEMPTS`` (``Run.attempts_counted``).
* **Moves**: a claim or a hand-back tells the hooks registered with
  ``apps.runs.hooks.on_run_moved`` (an evaluation's page counts the run as running or
  queued again).
* **Finish**: :func:`run_finish` moves a run to a final status, once, then tells the
  hooks registered with ``apps.runs.hooks.on_run_settled`` (an evaluation goes on).
* **Reap**: :func:`runs_reap` (beat) hands runs whose worker vanished to another worker,
  stops lost agent episodes, and sends again queued runs whose message the broker lost.

The runs app knows nothing of the features built on it: what a higher app must hear of
a run's end it registers here, in its ``AppConfig.ready``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import DatabaseError, close_old_connections, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.runs import endings, hooks, queue
from apps.runs.current_call import call_forget
from apps.runs.events import status_publish
from apps.runs.models import Run

logger = logging.getLogger(__name__)

# A lost database or broker connection: a transient fault of the platform, not the run's.
INFRASTRUCTURE_ERRORS: tuple[type[BaseException], ...] = (DatabaseError,)
try:  # the broker / channel layer's client
    import redis.exceptions

    INFRASTRUCTURE_ERRORS += (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
except ImportError:  # pragma: no cover - redis is a dependency
    pass

# What a run's driver returns when the run should be tried again later (its Celery task retries).
RETRY = "retry"
# A run that waits for its person's other runs on their own endpoints (see run_claim).
WAIT = "wait"


class WaitForOwnEndpoint(Exception):
    """The run is on its person's own endpoint and they already have as many runs there
    going as ``TAU2_OWN_ENDPOINT_RUNS_PER_PERSON`` allows: it stays queued."""


# A run "on its person's own endpoint": a side on a personal connection.
_ON_OWN_ENDPOINT = (
    Q(agent_connection__owner__isnull=False)
    | Q(user_connection__owner__isnull=False)
    | Q(judge_connection__owner__isnull=False)
    | Q(embedding_connection__owner__isnull=False)
)


def execution_id(prefix: str = "") -> str:
    """A plain id for one execution holding a run (``host:pid:random``, after ``prefix``):
    a redelivered message or a second request never passes for the first holder."""
    return f"{prefix}{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease() -> timedelta:
    return timedelta(seconds=settings.TAU2_RUN_LEASE_SECONDS)


def infrastructure_reason(exc: BaseException) -> str:
    """The :class:`Run.Resumption` of a hand-back after ``exc`` (one of
    :data:`INFRASTRUCTURE_ERRORS`): a database error, else the broker's."""
    if isinstance(exc, DatabaseError):
        return Run.Resumption.DATABASE
    return Run.Resumption.BROKER


def run_claim(*, run_id: int, worker: str) -> Run | None:
    """Take the run for ``worker`` if it is queued, or running under an expired lease.

    One UPDATE decides: of two workers racing for the same run, exactly one gets it (the
    UPDATE holds only if the row is still as read: same status, holder and attempts).
    Taking over an expired lease appends "worker lost" to ``resumptions``; a run never
    claimed before (``attempts`` 0: new, or its evaluation's failed runs retried)
    starts with none. Returns the claimed run, or ``None`` if someone else holds it or
    it is over.
    """
    for _ in range(3):  # read again only when the row changed under us (a hand-back)
        now = timezone.now()
        claimable = Run.objects.filter(pk=run_id, kind=Run.Kind.MODEL, stop_requested=False).filter(
            Q(status=Run.Status.QUEUED) | Q(status=Run.Status.RUNNING, lease_expires_at__lt=now)
        )
        seen = claimable.values("status", "worker", "attempts", "resumptions").first()
        if seen is None:
            return None
        person = claimable.filter(_ON_OWN_ENDPOINT).values_list("created_by", flat=True).first()
        if person is not None:
            with transaction.atomic():
                _wait_for_own_endpoint(person=person, run_id=run_id, now=now)
                claimed = _claim(claimable, seen, worker=worker, now=now)
        else:
            claimed = _claim(claimable, seen, worker=worker, now=now)
        if claimed:
            run = Run.objects.select_related("task", "created_by").get(pk=run_id)
            hooks.run_moved(run)  # queued → running: an evaluation's page counts it now
            return run
    return None


def _wait_for_own_endpoint(*, person: int, run_id: int, now) -> None:
    """Raise :class:`WaitForOwnEndpoint` when ``person`` has their limit of runs going on
    their own endpoints; the lock on their row makes two workers' counts one after the
    other (the caller claims within the same transaction)."""
    get_user_model().objects.select_for_update().filter(pk=person).exists()
    going = (
        Run.objects.filter(
            _ON_OWN_ENDPOINT,
            created_by=person,
            kind=Run.Kind.MODEL,
            status=Run.Status.RUNNING,
            lease_expires_at__gte=now,
        )
        .exclude(pk=run_id)
        .distinct()
        .count()
    )
    if going >= settings.TAU2_OWN_ENDPOINT_RUNS_PER_PERSON:
        raise WaitForOwnEndpoint(
            f"{going} of this person's runs on their own endpoints are going "
            f"(TAU2_OWN_ENDPOINT_RUNS_PER_PERSON = {settings.TAU2_OWN_ENDPOINT_RUNS_PER_PERSON})"
        )


def _claim(claimable, seen: dict, *, worker: str, now) -> int:
    """The conditional UPDATE of :func:`run_claim`: 1 if this worker got the run."""
    resumptions = list(seen["resumptions"]) if seen["attempts"] else []
    if seen["status"] == Run.Status.RUNNING:
        resumptions.append(Run.Resumption.WORKER_LOST)
    return claimable.filter(
        status=seen["status"], worker=seen["worker"], attempts=seen["attempts"]
    ).update(
        status=Run.Status.RUNNING,
        worker=worker,
        lease_expires_at=now + lease(),
        attempts=F("attempts") + 1,
        resumptions=resumptions,
        started_at=Coalesce(F("started_at"), now),
    )


def run_finish(
    *,
    run: Run,
    status: str,
    worker: str | None = None,
    error: str = "",
    termination_reason: str = "",
    reward_info: dict | None = None,
    failure: str = "",
    fields: dict[str, Any] | None = None,
) -> bool:
    """Move a run to a final status (once), with ``fields`` of its driver's own (a play
    session's phase), and its loop mark (``Run.loop_length``) measured. Returns False if
    it was already final or ``worker`` no longer holds it. Then each settled hook
    (``apps.runs.hooks``) hears of it."""
    rows = Run.objects.filter(pk=run.pk).exclude(status__in=Run.FINAL)
    if worker is not None:
        rows = rows.filter(worker=worker)
    done = rows.update(
        status=status,
        # Its messages are all stored by now (a driver stores its last ones, then ends it).
        loop_length=endings.measured_loop(run.pk),
        failure=failure,
        error=error,
        termination_reason=termination_reason,
        reward=reward_info.get("reward") if reward_info else None,
        reward_info=reward_info,
        finished_at=timezone.now(),
        lease_expires_at=None,
        **(fields or {}),
    )
    if done:
        call_forget(run_id=run.pk)  # no call is under way any more
        status_publish(run_id=run.pk)
        hooks.run_settled(run)
    return bool(done)


class Heartbeat:
    """Renews the run's lease while the worker holds it; notices when it is lost, and
    when someone asks the run to stop: :attr:`stopped` is set then, within about
    :data:`STOP_POLL_SECONDS`, so a model call in flight can end at once
    (``tau2_env.llm.outbound.interruptible``) instead of after its timeout."""

    STOP_POLL_SECONDS = 2.0

    def __init__(self, *, run_id: int, worker: str) -> None:
        self.run_id, self.worker = run_id, worker
        self.lost = False
        self.stopped = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{run_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        interval = max(1.0, settings.TAU2_RUN_LEASE_SECONDS / 3)
        renew_at = time.monotonic() + interval
        try:
            while not self._stop.wait(min(interval, self.STOP_POLL_SECONDS)):
                try:
                    if not self.stopped.is_set() and self._stop_asked():
                        self.stopped.set()
                    if time.monotonic() < renew_at:
                        continue
                    renew_at = time.monotonic() + interval
                    renewed = Run.objects.filter(
                        pk=self.run_id, worker=self.worker, status=Run.Status.RUNNING
                    ).update(lease_expires_at=timezone.now() + lease())
                except DatabaseError:  # the database restarts: try again next beat
                    logger.warning("Could not renew the lease of run %s", self.run_id)
                    close_old_connections()
                    continue
                if not renewed:
                    self.lost = True
                    self.stopped.set()  # whatever it waits for is no longer its to finish
                    return
        finally:
            close_old_connections()

    def _stop_asked(self) -> bool:
        return Run.objects.filter(pk=self.run_id, stop_requested=True).exists()


def run_hand_back(*, run: Run, worker: str, reason: str) -> str:
    """Queue ``run`` again after an infrastructure fault, recording ``reason`` (a
    :class:`Run.Resumption` that does not count, from :func:`infrastructure_reason`);
    returns :data:`RETRY` (the Celery task tries again later). While the database is
    away (a restart takes a few seconds) it keeps trying, for as long as the lease would
    have held the run; after that the lease has run out and the reaper re-queues the run
    instead — the next claim then records a lost worker, which counts: nobody can tell
    it from one."""
    if reason not in Run.HANDED_BACK:
        raise ValueError(f"{reason!r} is not a hand-back: one of {sorted(Run.HANDED_BACK)}")
    deadline = time.monotonic() + settings.TAU2_RUN_LEASE_SECONDS
    pause = 0.5
    while True:
        close_old_connections()  # the broken connection goes; the next query opens one
        try:
            # Only the holder writes the row while it holds it: a worker taking the run
            # over changes ``worker`` first, and then this UPDATE changes nothing.
            held = Run.objects.filter(pk=run.pk, worker=worker, status=Run.Status.RUNNING)
            resumptions = held.values_list("resumptions", flat=True).first()
            if resumptions is not None and held.update(
                status=Run.Status.QUEUED,
                worker="",
                lease_expires_at=None,
                resumptions=[*resumptions, reason],
            ):
                hooks.run_moved(run)
            break
        except DatabaseError:
            if time.monotonic() + pause > deadline:
                logger.warning("Run %s: the database is still away; the reaper takes it", run.pk)
                break
            time.sleep(pause)
            pause = min(pause * 2, 5.0)
    close_old_connections()
    return RETRY


def agent_run_requeue(*, run: Run, worker: str, reason: str) -> bool:
    """Put an outside agent's run of an evaluation, left unfinished by ``worker`` (its
    client disconnected, closed, or stopped renewing its lease), back in its
    evaluation's queue: QUEUED, its messages gone, "agent left" appended to its
    resumptions; what its customer spent stays counted. Returns False when ``worker`` no
    longer holds it (it ended, or another took it) or Stop was asked for it. Then the
    requeued hooks hear of it."""
    with transaction.atomic():
        held = (
            Run.objects.select_for_update()
            .filter(
                pk=run.pk,
                kind=Run.Kind.AGENT,
                worker=worker,
                status=Run.Status.RUNNING,
                stop_requested=False,  # stopped (its evaluation too): it ends, never queued
            )
            .exclude(evaluation=None)
            .first()
        )
        if held is None:
            return False
        held.events.all().delete()
        Run.objects.filter(pk=held.pk).update(
            status=Run.Status.QUEUED,
            worker="",
            lease_expires_at=None,
            dispatched_at=None,
            started_at=None,
            n_messages=0,
            n_tool_calls=0,
            error="",
            resumptions=[*held.resumptions, Run.Resumption.AGENT_GONE],
        )
    logger.info("Agent run %s back in its evaluation's queue: %s", run.pk, reason)
    status_publish(run_id=run.pk)
    hooks.run_requeued(run.pk)
    return True


def run_status(run_id: int) -> str:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).first() or "missing"


def runs_reap(*, now=None) -> list[int]:
    """Hand runs whose worker vanished to another worker, or fail them; send again the
    queued runs whose message was lost.

    A run still "running" after its lease expired lost its worker (crash, ``kill -9``,
    deploy); an agent run (kind ``agent``) is then stopped with the reason instead.
    While its counted attempts (``Run.attempts_counted``: hand-backs after a database
    or broker restart left out) are below ``TAU2_RUN_MAX_ATTEMPTS`` it is queued again,
    to resume from its stored events; then it fails with the reason. A run handed to the
    queue more than a lease ago and still not claimed may have lost its message (Redis
    restarted without persistence, or it could not be sent): it is sent again, at most
    once per lease — a duplicate is harmless, only one claim wins. Returns the ids sent
    to the workers.
    """
    now = now or timezone.now()
    # An agent's episode lives in the server that served it: when its lease (renewed at
    # each hop) ran out that server is gone, and the run is stopped, never re-queued.
    lost_agents = Run.objects.filter(
        kind=Run.Kind.AGENT, status=Run.Status.RUNNING, lease_expires_at__lt=now
    )
    for run in lost_agents:
        if run.evaluation_id is not None and not run.stop_requested:
            # An evaluation's episode: another client plays it.
            agent_run_requeue(
                run=run,
                worker=run.worker,
                reason="Its client's lease ran out (it stopped answering).",
            )
            continue
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
        elif run.attempts_counted >= settings.TAU2_RUN_MAX_ATTEMPTS:
            run_finish(
                run=run,
                status=Run.Status.FAILED,
                error=_gave_up(run),
                failure=Run.Failure.INFRASTRUCTURE,
            )
        else:
            queue.run_enqueue(run.pk, on_commit=False)
            requeued.append(run.pk)
    cutoff = now - lease()
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
            queue.run_enqueue(run_id, on_commit=False)
            requeued.append(run_id)
    return requeued


def _gave_up(run: Run) -> str:
    handed_back = run.attempts - run.attempts_counted
    also = (
        f" (and was handed back {handed_back} time{'s' if handed_back > 1 else ''} after a "
        "database or broker restart, which does not count)"
        if handed_back
        else ""
    )
    return (
        f"The worker running it stopped {run.attempts_counted} times{also}; "
        "giving up rather than leaving it running."
    )

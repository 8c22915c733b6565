"""Imports and submission checks as jobs on the workers, never inside a web request.

:func:`evaluation_job_import` and :func:`evaluation_job_check` store what the job needs
(the uploaded file in the job's row, where every worker can read it; a check's choice and
details as JSON) and queue its id once that commits; the request returns at once and the
person follows the job's page. A person has at most ``TAU2_EVAL_JOBS_PER_PERSON`` jobs
waiting or running: one more is refused, in words, before anything is stored.

:func:`evaluation_job_execute` is the worker's side: one UPDATE claims the job (a second
worker, or a duplicated message, lets go), a heartbeat renews its lease while it works,
and it ends DONE (with the evaluation it made, or the checks' verdicts) or FAILED with a
reason a person can read — a bad file's own words from the import. Only the current
claim ends it: an import whose claim was reaped meanwhile stores nothing.
:func:`evaluation_jobs_reap` (beat, and a job's page when it is looked at) sends again a
job whose worker or message was lost, once for a lost worker, and fails it the second time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict
from datetime import date, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import DatabaseError, close_old_connections, transaction
from django.db.models import F
from django.utils import timezone

from apps.accounts.vault import SignInRequired
from apps.connections.llm_routes import (
    ConnectionUnavailable,
    ResolvedRoute,
    route_for,
    route_resolve,
)
from apps.evaluations import exports, imports, regrade, submission
from apps.evaluations.models import Evaluation, EvaluationJob
from apps.runs import budgets, queue
from tau2_env.engine.submission import CHECK_TIMEOUT_SECONDS, SubmissionInvalid

logger = logging.getLogger(__name__)

IN_FLIGHT = (EvaluationJob.Status.QUEUED, EvaluationJob.Status.RUNNING)
CLAIMED_ELSEWHERE = "claimed"
# How often the page's progress is written while an import re-scores.
PROGRESS_SECONDS = 1.0

INTERNAL_ERROR = (
    "The server failed while doing this (an internal error, logged for its operators); "
    "nothing was stored. Try again, or tell them if it happens again."
)
LOST_TWICE = (
    "The worker doing this was lost twice (a crash or a restart) before it finished; "
    "nothing was stored. Try again."
)


class JobRefused(Exception):
    """The person may not start one more job now; the message says why, in words."""


# --- asking -------------------------------------------------------------------------


def evaluation_job_import(
    *,
    user,
    data: bytes,
    name: str = "",
    filename: str = "",
    judge: ResolvedRoute | None = None,
) -> EvaluationJob:
    """Queue the import of the ``tau2 run`` results file ``data`` for ``user`` (see
    :func:`apps.evaluations.imports.evaluation_import`; nothing of it is read here), with
    τ²'s NL-assertion ``judge`` for the tasks whose reward needs it (as a re-grade's).

    Raises ``ValidationError`` for a file above ``TAU2_EVAL_MAX_UPLOAD_BYTES`` or a judge
    its budget refuses, and :class:`JobRefused` at the per-person limit; nothing is stored
    then."""
    if len(data) > imports.max_upload_bytes():
        raise ValidationError(imports.too_large(len(data)))
    return _create(
        user=user,
        kind=EvaluationJob.Kind.IMPORT,
        upload=data,
        size=len(data),
        name=(name or "").strip()[:200],
        filename=(filename or "")[:255],
        params={"judge": _judge_value(user=user, judge=judge)},
    )


def evaluation_job_check(
    *, user, picks: Mapping[str, str], details: Mapping[str, object]
) -> EvaluationJob:
    """Queue τ²'s own checks (``tau2 submit validate``, ``verify-trajs``) of the
    submission ``picks`` make (``{domain: evaluation id}``, as the page's query) with the
    form's cleaned ``details``, for ``user``. Raises :class:`JobRefused` at the limit."""
    return _create(
        user=user,
        kind=EvaluationJob.Kind.CHECK,
        params={
            "picks": {str(k): str(v) for k, v in picks.items()},
            "details": {k: v.isoformat() if isinstance(v, date) else v for k, v in details.items()},
        },
    )


def evaluation_job_regrade(
    *, user, evaluation: Evaluation, judge: ResolvedRoute | None = None
) -> EvaluationJob:
    """Queue the re-grade of ``evaluation`` on this server's task set for ``user`` (see
    :mod:`apps.evaluations.regrade`), with τ²'s NL-assertion ``judge`` (a model ``user``
    may use, as the run form's judge picker cleans it) for the tasks whose reward needs
    it, or none (those are not re-scored). Raises ``ValidationError`` when it cannot be
    re-graded (the reason in words, a judge refused by its budget too) and
    :class:`JobRefused` at the limit."""
    refusal = regrade.regrade_refusal(evaluation)
    if refusal:
        raise ValidationError(refusal)
    return _create(
        user=user,
        kind=EvaluationJob.Kind.REGRADE,
        params={"evaluation": evaluation.pk, "judge": _judge_value(user=user, judge=judge)},
        name=f"{evaluation}"[:170] + " (re-graded)",
    )


def _judge_value(*, user, judge: ResolvedRoute | None) -> str:
    """What a job keeps of its ``judge`` (the picker's value, "" for none: it is resolved
    again on the worker); ``ValidationError`` when its budget refuses it already."""
    if judge is None:
        return ""
    refused = budgets.judge_refusal(
        connection=judge.connection, model=judge.model, prices=judge.prices, user=user
    )
    if refused:
        raise ValidationError(f"{refused}.")
    return judge.value


def jobs_limit_message(*, in_flight: int, limit: int) -> str:
    return (
        f"You have {in_flight} import{'s' if in_flight != 1 else ''} or submission "
        f"check{'s' if in_flight != 1 else ''} waiting or running, and one person may have "
        f"{limit} at once here: try again when one of them has ended."
    )


def _create(*, user, kind: str, **fields) -> EvaluationJob:
    evaluation_jobs_reap(created_by=user)  # a job whose worker was lost does not count
    limit = settings.TAU2_EVAL_JOBS_PER_PERSON
    with transaction.atomic():
        # One person's requests are counted one at a time: two at once cannot both pass.
        list(get_user_model().objects.select_for_update().filter(pk=user.pk).values("pk"))
        in_flight = EvaluationJob.objects.filter(created_by=user, status__in=IN_FLIGHT).count()
        if in_flight >= limit:
            raise JobRefused(jobs_limit_message(in_flight=in_flight, limit=limit))
        job = EvaluationJob.objects.create(
            kind=kind, created_by=user, lease_expires_at=_lease_end(), **fields
        )
        _send(job.pk)
    return job


def _send(job_id: int, *, robust: bool = False) -> None:
    """Queue job ``job_id`` for a worker once the transaction commits: its id only."""
    queue.enqueue(queue.EVALUATION_JOB, job_id, robust=robust)


def _lease_end(seconds: float | None = None):
    return timezone.now() + timedelta(
        seconds=settings.TAU2_EVAL_JOB_LEASE_SECONDS if seconds is None else seconds
    )


# --- the worker's side ----------------------------------------------------------------


class _Superseded(Exception):
    """This claim is no longer the job's current one (reaped and claimed again)."""


class _Claim:
    """One worker's claim of a job (``attempts`` names it): it renews the lease on a
    thread while the work goes on, writes progress, and ends the job only if it is
    still the current claim."""

    def __init__(self, job: EvaluationJob) -> None:
        self.pk, self.attempts = job.pk, job.attempts
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"job-{job.pk}", daemon=True)
        self._written = 0.0

    def current(self):
        return EvaluationJob.objects.filter(
            pk=self.pk, status=EvaluationJob.Status.RUNNING, attempts=self.attempts
        )

    def __enter__(self) -> _Claim:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        interval = max(1.0, settings.TAU2_EVAL_JOB_LEASE_SECONDS / 3)
        try:
            while not self._stop.wait(interval):
                try:
                    if not self.current().update(lease_expires_at=_lease_end()):
                        return  # ended, or no longer this claim's
                except DatabaseError:  # the database restarts: try again next beat
                    logger.warning("Could not renew the lease of evaluation job %s", self.pk)
                    close_old_connections()
        finally:
            close_old_connections()

    def progress(self, done: int, total: int) -> None:
        """Where the work is (``done`` of ``total``), written at most every
        :data:`PROGRESS_SECONDS`; raises :class:`_Superseded` when the claim was lost."""
        now = time.monotonic()
        if done < total and now - self._written < PROGRESS_SECONDS:
            return
        self._written = now
        if not self.current().update(progress_done=done, progress_total=total):
            raise _Superseded

    def finish(self, **fields) -> None:
        """End the job DONE with ``fields``; raises :class:`_Superseded` (undoing the
        transaction it is in) when the claim was lost."""
        if not self.current().update(
            status=EvaluationJob.Status.DONE, upload=b"", finished_at=timezone.now(), **fields
        ):
            raise _Superseded

    def fail(self, error: str) -> None:
        self.current().update(
            status=EvaluationJob.Status.FAILED,
            error=error[:8000] or INTERNAL_ERROR,
            upload=b"",
            finished_at=timezone.now(),
        )


def evaluation_job_execute(*, job_id: int) -> str:
    """Do job ``job_id`` (once: the claim is one UPDATE). Returns its status afterwards,
    or :data:`CLAIMED_ELSEWHERE` when another claim holds or held it."""
    now = timezone.now()
    claimed = EvaluationJob.objects.filter(pk=job_id, status=EvaluationJob.Status.QUEUED).update(
        status=EvaluationJob.Status.RUNNING,
        attempts=F("attempts") + 1,
        started_at=now,
        lease_expires_at=_lease_end(),
    )
    if not claimed:
        return CLAIMED_ELSEWHERE
    job = EvaluationJob.objects.defer("upload").select_related("created_by").get(pk=job_id)
    with _Claim(job) as claim:
        try:
            if job.kind == EvaluationJob.Kind.IMPORT:
                _import(job, claim)
            elif job.kind == EvaluationJob.Kind.REGRADE:
                _regrade(job, claim)
            else:
                _check(job, claim)
        except _Superseded:
            return CLAIMED_ELSEWHERE
        except ValidationError as exc:
            claim.fail(" ".join(exc.messages))
        except Exception:  # a bug: still a readable end, never a stuck "running"
            logger.exception("Evaluation job %s failed", job.pk)
            claim.fail(INTERNAL_ERROR)
    return EvaluationJob.objects.values_list("status", flat=True).get(pk=job_id)


def _import(job: EvaluationJob, claim: _Claim) -> None:
    data = bytes(EvaluationJob.objects.values_list("upload", flat=True).get(pk=job.pk))

    def stored(evaluation: Evaluation) -> None:
        claim.finish(evaluation=evaluation)

    imports.evaluation_import(
        user=job.created_by,
        data=data,
        name=job.name,
        filename=job.filename,
        progress=claim.progress,
        on_stored=stored,
        judge=_judge(job),
    )


def _regrade(job: EvaluationJob, claim: _Claim) -> None:
    old = Evaluation.objects.filter(pk=(job.params or {}).get("evaluation")).first()
    if old is None:
        raise ValidationError("The evaluation to re-grade was deleted meanwhile.")
    refusal = regrade.regrade_refusal(old)
    if refusal:
        raise ValidationError(refusal)
    version, task_set = regrade.task_set_of(old)
    judge = _judge(job)
    data = json.dumps(exports.evaluation_export_tau2(old)).encode()

    def stored(evaluation: Evaluation) -> None:
        flips = regrade.regrade_flips(old, evaluation)
        evaluation.provenance["source"] = "re-grade"
        evaluation.provenance["regrade"] = {
            "of": old.pk,
            "from_tau2_version": version,
            "from_task_set_hash": task_set,
            "flips": flips,
        }
        evaluation.save(update_fields=["provenance"])
        claim.finish(evaluation=evaluation)

    imports.evaluation_import(
        user=job.created_by,
        data=data,
        name=job.name,
        filename=f"evaluation-{old.pk}.json",
        progress=claim.progress,
        on_stored=stored,
        judge=judge,
    )


def _judge(job: EvaluationJob) -> imports.ImportJudge | None:
    """The re-grade's judge, checked again for its asker now (access, sign-in, the
    connection's key); ``ValidationError`` in words when it can no longer be used."""
    value = (job.params or {}).get("judge") or ""
    if not value:
        return None
    try:
        picked = route_resolve(value, user=job.created_by, role="judge")
        route = route_for(connection=picked.connection, model=picked.model, user=job.created_by)
    except (ValueError, SignInRequired, ConnectionUnavailable) as exc:
        raise ValidationError(f"The NL judge {value} cannot be used: {exc}") from None
    return imports.ImportJudge(
        model=picked.model,
        connection=picked.connection,
        value=picked.value,
        route=route,
        prices=picked.prices,
    )


def _check(job: EvaluationJob, claim: _Claim) -> None:
    params = job.params or {}
    plan = submission.submission_plan(user=job.created_by, picks=params.get("picks") or {})
    if not plan.ok:
        raise ValidationError(" ".join(plan.refusals))
    draft = submission.submission_draft(plan)
    if draft.refusal:
        raise ValidationError(draft.refusal)
    details = submission.submission_details(
        params.get("details") or {}, user_simulator=draft.user_llm
    )
    # τ²'s two commands may each take CHECK_TIMEOUT_SECONDS: the lease covers them too.
    claim.current().update(lease_expires_at=_lease_end(2 * CHECK_TIMEOUT_SECONDS + 60))
    try:
        checks = submission.submission_checks(draft, details)
    except SubmissionInvalid as exc:
        raise ValidationError(" ".join(exc.problems)) from None
    claim.finish(result={"checks": [asdict(check) for check in checks]})


# --- lost workers and messages --------------------------------------------------------


def evaluation_jobs_reap(*, now=None, created_by=None, pks=None) -> list[int]:
    """Jobs whose lease ran out (of everyone, or of ``created_by``, or ``pks``): a queued
    one whose message was lost is sent again; a running one whose worker was lost is
    queued again once, and failed in words the second time. Returns the ids sent again."""
    now = now or timezone.now()
    stale = EvaluationJob.objects.filter(status__in=IN_FLIGHT, lease_expires_at__lt=now)
    if created_by is not None:
        stale = stale.filter(created_by=created_by)
    if pks is not None:
        stale = stale.filter(pk__in=pks)
    sent = []
    for pk, status, attempts in stale.values_list("pk", "status", "attempts"):
        current = EvaluationJob.objects.filter(
            pk=pk, status=status, attempts=attempts, lease_expires_at__lt=now
        )
        if status == EvaluationJob.Status.RUNNING and attempts >= 2:
            current.update(
                status=EvaluationJob.Status.FAILED,
                error=LOST_TWICE,
                upload=b"",
                finished_at=now,
            )
        elif current.update(status=EvaluationJob.Status.QUEUED, lease_expires_at=_lease_end()):
            _send(pk, robust=True)
            sent.append(pk)
    return sent

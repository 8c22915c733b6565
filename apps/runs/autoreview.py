"""Review by an LLM (τ²'s ``tau2 review``): staff ask a reviewer model to read a run, its
task's user scenario and the domain policy; its findings become the run's review labels
of origin ``auto``, pending until a person accepts, edits or dismisses each.

:func:`autoreview_request` (one run) and :func:`autoreviews_request` (an evaluation's
failures, or all its runs) store an :class:`AutoReview` and queue ``runs.autoreview``
with its id only; :func:`autoreview_execute` is the worker's side. The reviewer runs on
the requesting person's credentials and rules (``route_for``), its tokens and cost are
metered on the AutoReview at the reviewer's prices fixed when asked (unpriced: ``None``,
never $0). The prompt and the reading of the answer are ``tau2_env.engine.review``'s: an answer
that cannot be used fails the review in words and stores no finding.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.accounts.access import can_review
from apps.accounts.vault import SignInRequired
from apps.connections.llm_routes import ConnectionUnavailable, ResolvedRoute, route_for
from apps.inference.pricing import cost_usd
from apps.runs import queue
from apps.runs.models import (
    AutoReview,
    ReviewerAsked,
    ReviewLabel,
    Run,
    RunEvent,
    StandingReview,
)
from apps.runs.selectors import SOLVED
from tau2_env.engine import catalog
from tau2_env.engine import review as tau2_review
from tau2_env.llm import gateway

logger = logging.getLogger(__name__)

# The reviewer's words → the label's columns.
_CATEGORY_OF_SOURCE = {
    ReviewLabel.Source.AGENT: ReviewLabel.Category.AGENT_ERROR,
    ReviewLabel.Source.USER: ReviewLabel.Category.USER_SIM_ERROR,
}
_SEVERITY = {"minor": ReviewLabel.Severity.BENIGN, "critical": ReviewLabel.Severity.CRITICAL}

WHICH_FAILURES = "failures"
WHICH_ALL = "all"
# Every run, those ended and each later one as it ends (``tau2 run --auto-review``).
WHICH_EACH = "each"
# What a review keeps of who asked which reviewer: ReviewerAsked's fields.
ASKED_FIELDS = tuple(field.name for field in ReviewerAsked._meta.fields)


def can_request(user) -> bool:
    """Auto-reviews are started by staff (they spend on the reviewer's model)."""
    return bool(user is not None and user.is_authenticated and user.is_staff)


# --- writes -------------------------------------------------------------------------


def _reviewable(run: Run) -> bool:
    return run.status in Run.FINAL and run.n_messages > 0


def modes() -> dict[str, str | None]:
    """Each review mode (``tau2 review --mode``) → why it cannot run here (``None``: it
    can). τ² 1.x's reviewer has both; on τ² 0.2, which has none, the studio's reviewer
    reads both sides only."""
    own = tau2_review.tau2_reviews()
    return {
        mode: None
        if mode in own or (not own and mode == AutoReview.Mode.FULL)
        else "τ² 0.2 has no reviewer of the customer alone (it came with τ² 1.0)"
        for mode in AutoReview.Mode.values
    }


def _mode_checked(mode: str) -> str:
    refusal = modes().get(mode, f"{mode!r} is not a review mode")
    if refusal:
        raise ValidationError(refusal)
    return mode


def autoreview_request(
    *, run: Run, by, reviewer: ResolvedRoute, mode: str = AutoReview.Mode.FULL
) -> AutoReview:
    """Ask ``reviewer`` to review ``run`` in ``mode`` (on ``by``'s credentials, once this
    commits).

    Raises ``PermissionDenied`` unless ``by`` is staff and ``ValidationError`` for a run
    that has not ended or has no message, or a mode this τ² has not."""
    if not can_request(by):
        raise PermissionDenied("Only staff may start an auto-review.")
    if not _reviewable(run):
        raise ValidationError("Only a finished run with messages can be reviewed.")
    return _request(run=run, by=by, reviewer=reviewer, mode=_mode_checked(mode))


def autoreviews_request(
    *,
    evaluation_id: int,
    by,
    reviewer: ResolvedRoute,
    which: str,
    mode: str = AutoReview.Mode.FULL,
) -> list:
    """Ask ``reviewer`` to review evaluation ``evaluation_id``'s finished runs: its
    failures (failed, or a reward below 1) with ``which="failures"``, every one with
    ``"all"``. Returns the AutoReviews queued (none for a run without messages). By the
    evaluation's id: the runs app sits below the evaluations app."""
    if not can_request(by):
        raise PermissionDenied("Only staff may start an auto-review.")
    if which not in (WHICH_FAILURES, WHICH_ALL, WHICH_EACH):
        raise ValidationError(f"Review which runs? {which!r} is not failures, all or each.")
    _mode_checked(mode)
    runs = Run.objects.filter(evaluation_id=evaluation_id, status__in=Run.FINAL, n_messages__gt=0)
    if which == WHICH_FAILURES:
        runs = runs.filter(Q(status=Run.Status.FAILED) | Q(reward__lt=SOLVED))
    standing = which == WHICH_EACH
    if standing:
        # Committed before the sweep: a run that ends from now on sees it (the settled
        # hook queues its review); one that ended before is final to the sweep below.
        # No run ending meanwhile falls between the two.
        with transaction.atomic():
            StandingReview.objects.update_or_create(
                evaluation_id=evaluation_id,
                defaults={**_asked(by=by, reviewer=reviewer), "mode": mode},
            )
        # Not those reviewed by this reviewer for ``by`` already. A run that ends while
        # the sweep runs may be queued by both: the constraint on standing reviews keeps
        # one, whichever commits first (:func:`_queued`).
        runs = runs.exclude(
            auto_reviews__requested_by=by, auto_reviews__reviewer_model=reviewer.model
        )
    asked = _asked(by=by, reviewer=reviewer)
    with transaction.atomic():
        queued = [
            _queued(run=run, mode=mode, asked=asked, standing=standing)
            for run in runs.order_by("pk")
        ]
    return [review for review in queued if review is not None]


def _asked(*, by, reviewer: ResolvedRoute) -> dict:
    """The :class:`ReviewerAsked` fields of ``by`` asking ``reviewer``, its prices fixed now."""
    prices = reviewer.prices
    return {
        "requested_by": by,
        "reviewer_model": reviewer.model,
        "reviewer_connection": reviewer.connection,
        "price_input": prices[0] if prices else None,
        "price_output": prices[1] if prices else None,
    }


def _queued(*, run: Run, mode: str, asked: dict, standing: bool = False) -> AutoReview | None:
    """Queue ``run``'s review (a worker gets it once this commits). ``standing``: a
    standing review's, of which a run has one per reviewer and requester
    (``autoreview_one_standing_per_run``): ``None`` when its sweep and the run's end both
    queued it and the other's row was there first (committed, or committing: the
    database waits for it)."""
    try:
        with transaction.atomic():  # a savepoint: a refused row leaves the sweep going
            review = AutoReview.objects.create(run=run, mode=mode, standing=standing, **asked)
    except IntegrityError:
        if not standing:
            raise
        return None
    queue.autoreview_enqueue(review.pk)
    return review


def _request(*, run: Run, by, reviewer: ResolvedRoute, mode: str) -> AutoReview:
    """Queue one review ``by`` asked for (never refused: a run may be reviewed again)."""
    review = AutoReview.objects.create(run=run, mode=mode, **_asked(by=by, reviewer=reviewer))
    queue.autoreview_enqueue(review.pk)
    return review


def standing_review_stop(*, evaluation_id: int, by) -> bool:
    """Stop reviewing ``evaluation_id``'s runs as they end; the reviews made stay. False
    when none was standing."""
    if not can_request(by):
        raise PermissionDenied("Only staff may stop an auto-review.")
    deleted, _ = StandingReview.objects.filter(evaluation_id=evaluation_id).delete()
    return bool(deleted)


def run_settled_review(run: Run) -> None:
    """The runs' settled hook (registered by ``RunsConfig.ready``): a run of an evaluation
    under a standing review is queued for its review as it ends, on the standing review's
    reviewer, prices and requester (who must still be staff)."""
    if run.evaluation_id is None:
        return
    standing = StandingReview.objects.filter(evaluation_id=run.evaluation_id).first()
    if standing is None or not can_request(standing.requested_by):
        return
    run.refresh_from_db(fields=["status", "n_messages"])
    if not _reviewable(run):
        return
    asked = {field: getattr(standing, field) for field in ASKED_FIELDS}
    with transaction.atomic():
        _queued(run=run, mode=standing.mode, asked=asked, standing=True)


def autoreview_execute(*, review_id: int) -> str:
    """The worker's side: claim the review (once), ask the reviewer, store its findings
    all at once, or fail the review with a readable reason and no finding. Returns the
    review's status afterwards."""
    claimed = AutoReview.objects.filter(pk=review_id, status=AutoReview.Status.QUEUED).update(
        status=AutoReview.Status.RUNNING, started_at=timezone.now(), attempts=F("attempts") + 1
    )
    review = (
        AutoReview.objects.select_related("run", "run__task", "requested_by", "reviewer_connection")
        .filter(pk=review_id)
        .first()
    )
    if review is None:  # its run was deleted since
        return "gone"
    if not claimed:
        return review.status
    run = review.run
    events = list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", "message"))
    try:
        route = route_for(
            connection=review.reviewer_connection,
            model=review.reviewer_model,
            user=review.requested_by,
        )
    except (SignInRequired, ConnectionUnavailable) as exc:
        return _fail(review, f"The reviewer could not be reached: {exc}")
    by_tau2 = review.mode in tau2_review.tau2_reviews()
    if not by_tau2 and review.mode != AutoReview.Mode.FULL:
        return _fail(review, modes()[review.mode] or "This mode cannot run here.")
    try:
        if by_tau2:
            outcome = tau2_review.review_run_tau2(
                route=route,
                domain=run.domain,
                task_id=run.task.task_id,
                trace=events,
                mode=review.mode,
                termination_reason=run.termination_reason or None,
                retrieval_config=run.retrieval_config or None,
                user_llm=run.user_model or None,
            )
        else:
            outcome = tau2_review.review_run(
                route=route,
                messages=_request_messages(run=run, events=events),
                seqs=[seq for seq, _ in events],
            )
    except tau2_review.ReviewReplyError as exc:
        return _fail(review, f"The reviewer's answer could not be used: {exc}", usage=exc.usage)
    except gateway.LLMCallError as exc:
        return _fail(review, f"The reviewer's call failed: {exc}")
    except Exception as exc:  # a bug: still a readable end, never a stuck "reviewing"
        logger.exception("Auto-review %s failed", review.pk)
        return _fail(review, gateway.explain_error(exc, secrets=route.secrets()).message)
    by_seq = dict(RunEvent.objects.filter(run=run).values_list("seq", "pk"))
    with transaction.atomic():
        for finding in outcome.review.findings:
            label = ReviewLabel(
                run=run,
                event_id=by_seq[finding.seq] if finding.seq is not None else None,
                category=_CATEGORY_OF_SOURCE[finding.source],
                severity=_SEVERITY[finding.severity],
                origin=ReviewLabel.Origin.AUTO,
                status=ReviewLabel.Status.PENDING,
                source=finding.source,
                kind=finding.category,
                justification=finding.justification,
                auto_review=review,
                created_by=None,
            )
            label.full_clean(exclude=["created_by"])
            label.save()
        if not _finish(
            review,
            status=AutoReview.Status.DONE,
            usage=outcome.usage,
            summary=outcome.review.summary,
            reviewer=AutoReview.Reviewer.TAU2 if by_tau2 else AutoReview.Reviewer.STUDIO,
            authentication=dict(outcome.review.authentication)
            if outcome.review.authentication
            else None,
        ):  # reaped while it reviewed: the current claim stores the findings, not this one
            transaction.set_rollback(True)
            return AutoReview.objects.get(pk=review.pk).status
    return AutoReview.Status.DONE


def _request_messages(*, run: Run, events: list) -> list[dict[str, str]]:
    task = catalog.get_task(run.domain, run.task.task_id)
    if run.status == Run.Status.COMPLETED:
        outcome = f"Scored by τ²: reward {run.reward:g}. Ended: {run.termination_reason or '?'}."
    else:
        outcome = f"The run {run.get_status_display()}: {run.error or run.termination_reason}"
    return tau2_review.review_messages(
        policy=catalog.get_domain(run.domain).policy,
        scenario=task.raw.get("user_scenario") or {},
        trace=events,
        outcome=outcome,
    )


def _fail(review: AutoReview, error: str, *, usage: gateway.Usage | None = None) -> str:
    _finish(review, status=AutoReview.Status.FAILED, usage=usage or gateway.Usage(), error=error)
    return AutoReview.Status.FAILED


def _finish(
    review: AutoReview,
    *,
    status: str,
    usage: gateway.Usage,
    error: str = "",
    summary: str = "",
    reviewer: str = "",
    authentication: dict | None = None,
) -> bool:
    """End the review, if this claim is still the current one; False when it was reaped."""
    return (
        AutoReview.objects.filter(
            pk=review.pk, status=AutoReview.Status.RUNNING, attempts=review.attempts
        ).update(
            status=status,
            error=error[:4000],
            summary=summary[:4000],
            reviewer=reviewer,
            authentication=authentication,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            cost_usd=cost_usd(
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                prices=review.prices,
            )
            if usage.calls
            else None,
            finished_at=timezone.now(),
        )
        == 1
    )


LOST_TWICE = (
    "The worker reviewing this run was lost twice (a crash or a restart): start the review again."
)


def autoreviews_reap(*, now=None) -> list[int]:
    """Reviews still "reviewing" ``TAU2_AUTOREVIEW_LEASE_SECONDS`` after their claim lost
    their worker (a crash, ``kill -9``, a deploy): queued again once, failed in words the
    second time, never left "reviewing". Returns the ids queued again (beat, with the
    runs' reap)."""
    now = now or timezone.now()
    limit = now - timedelta(seconds=settings.TAU2_AUTOREVIEW_LEASE_SECONDS)
    stale = AutoReview.objects.filter(status=AutoReview.Status.RUNNING, started_at__lt=limit)
    requeued = []
    for review in stale:
        current = AutoReview.objects.filter(
            pk=review.pk, status=AutoReview.Status.RUNNING, attempts=review.attempts
        )
        if review.attempts >= 2:
            current.update(status=AutoReview.Status.FAILED, error=LOST_TWICE, finished_at=now)
        elif current.update(status=AutoReview.Status.QUEUED):
            queue.autoreview_enqueue(review.pk)
            requeued.append(review.pk)
    return requeued


def _decide(label: ReviewLabel, by) -> None:
    if not can_review(by):
        raise PermissionDenied("Only reviewers may decide on findings.")
    if label.origin != ReviewLabel.Origin.AUTO:
        raise ValidationError("Only an auto-review's finding is accepted or dismissed.")


def finding_accept(*, label: ReviewLabel, by) -> ReviewLabel:
    """Accept an auto-review finding: from now on it counts like a person's label."""
    _decide(label, by)
    label.status, label.decided_by, label.decided_at = (
        ReviewLabel.Status.ACCEPTED,
        by,
        timezone.now(),
    )
    label.save(update_fields=["status", "decided_by", "decided_at"])
    return label


def finding_dismiss(*, label: ReviewLabel, by) -> ReviewLabel:
    """Dismiss an auto-review finding: kept (what the reviewer said), never counted."""
    _decide(label, by)
    label.status, label.decided_by, label.decided_at = (
        ReviewLabel.Status.DISMISSED,
        by,
        timezone.now(),
    )
    label.save(update_fields=["status", "decided_by", "decided_at"])
    return label


def finding_edit(
    *, label: ReviewLabel, by, source: str, severity: str, kind: str, justification: str
) -> ReviewLabel:
    """Edit an auto-review finding: it becomes ``by``'s label (origin human, accepted),
    its category following the source; ``auto_review`` still says where it came from."""
    _decide(label, by)
    label.source, label.severity, label.kind = source, severity, kind
    label.justification = justification.strip()
    label.category = _CATEGORY_OF_SOURCE.get(source, label.category)
    label.origin, label.status, label.created_by = (
        ReviewLabel.Origin.HUMAN,
        ReviewLabel.Status.ACCEPTED,
        by,
    )
    label.decided_by, label.decided_at = by, timezone.now()
    label.full_clean()
    label.save()
    return label


# --- reads --------------------------------------------------------------------------


def pending_findings():
    """Auto-review findings nobody decided on yet, oldest first (for the review queue)."""
    return (
        ReviewLabel.objects.filter(
            origin=ReviewLabel.Origin.AUTO, status=ReviewLabel.Status.PENDING
        )
        .select_related("run", "run__task", "event", "auto_review")
        .order_by("created_at", "id")
    )


def run_autoreviews(*, run_id: int) -> list[AutoReview]:
    """The run's auto-reviews, newest first, with their findings counted."""
    return list(
        AutoReview.objects.filter(run_id=run_id)
        .select_related("reviewer_connection", "requested_by")
        .order_by("-created_at", "-id")
    )

"""An auto-review whose worker was lost (a crash, ``kill -9``, a deploy) is never left
"reviewing": beat's reap queues it again once, fails it in words the second time, and a
claim that was reaped stores nothing once it ends."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from apps.runs import autoreview
from apps.runs.models import AutoReview, ReviewLabel
from tests.runs.test_autoreview import FINDINGS, reviewer
from tests.support.review import stored_run
from tests.support.scripts import AGENT_MODEL, refresh_agent_models


def _review(run, by, **fields) -> AutoReview:
    return AutoReview.objects.create(run=run, requested_by=by, reviewer_model=AGENT_MODEL, **fields)


def _long_ago():
    return timezone.now() - timedelta(seconds=settings.TAU2_AUTOREVIEW_LEASE_SECONDS + 1)


def test_a_review_whose_worker_was_lost_is_queued_again_then_failed(alice):
    run = stored_run(alice, messages=2)
    lost = _review(run, alice, status="running", started_at=_long_ago(), attempts=1)
    fresh = _review(run, alice, status="running", started_at=timezone.now(), attempts=1)

    assert autoreview.autoreviews_reap() == [lost.pk]
    lost.refresh_from_db()
    fresh.refresh_from_db()
    assert lost.status == AutoReview.Status.QUEUED
    assert fresh.status == AutoReview.Status.RUNNING  # still within its lease

    AutoReview.objects.filter(pk=lost.pk).update(
        status="running", started_at=_long_ago(), attempts=2
    )
    assert autoreview.autoreviews_reap() == []
    lost.refresh_from_db()
    assert lost.status == AutoReview.Status.FAILED and lost.error == autoreview.LOST_TWICE
    assert lost.finished_at is not None


def test_a_reaped_claim_stores_no_finding_the_current_one_does(llm_server, alice, staff):
    refresh_agent_models()
    reviewer(llm_server, FINDINGS)
    run = stored_run(alice, messages=4, reward=0.0)
    review = _review(run, staff)
    # The first worker claims it, is lost, and the reap queues it again; a second worker
    # claims it. The first one's answer, coming in late, is not stored.
    AutoReview.objects.filter(pk=review.pk).update(status="running", attempts=1)
    stale = AutoReview.objects.get(pk=review.pk)
    AutoReview.objects.filter(pk=review.pk).update(status="queued")
    assert autoreview.autoreview_execute(review_id=review.pk) == AutoReview.Status.DONE
    review.refresh_from_db()
    assert review.attempts == 2 and review.status == AutoReview.Status.DONE
    labels = ReviewLabel.objects.filter(run=run).count()
    assert labels == len(FINDINGS["findings"])
    assert not autoreview._finish(
        stale, status=AutoReview.Status.DONE, usage=autoreview.gateway.Usage()
    )
    assert ReviewLabel.objects.filter(run=run).count() == labels

"""Celery tasks of runs: thin, JSON, ids only (never a token). Queued through
``apps.runs.queue`` by name."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from apps.runs import autoreview, lifecycle, queue, runner


# A fault is tried again up to 20 times; a wait for the person's other runs, without limit
# (Celery reads retry(max_retries=None) as "the task's own": so the task's is None).
@shared_task(
    bind=True, name=queue.EXECUTE_RUN, acks_late=True, ignore_result=True, max_retries=None
)
def execute_run(self, run_id: int) -> str:
    """Drive run ``run_id`` to its end (or let go if another worker holds it). After an
    infrastructure fault (database or broker restarting) it is tried again later."""
    status = runner.run_execute(run_id=run_id, worker=lifecycle.execution_id())
    if status == lifecycle.RETRY:
        raise self.retry(countdown=min(2 ** min(self.request.retries, 5), 30), max_retries=20)
    if status == lifecycle.WAIT:
        # Its person's other runs on their own endpoints first: asked again, as long as
        # they go on (a wait is no failure, so it has no limit of tries).
        raise self.retry(countdown=settings.TAU2_OWN_ENDPOINT_WAIT_SECONDS, max_retries=None)
    return status


@shared_task(name="runs.reap", ignore_result=True)
def reap_runs() -> list[int]:
    """Re-queue runs whose worker vanished (beat, every TAU2_RUN_REAP_SECONDS), and the
    auto-reviews whose worker vanished."""
    autoreview.autoreviews_reap()
    return lifecycle.runs_reap()


@shared_task(name=queue.AUTOREVIEW, acks_late=True, ignore_result=True)
def review_run(review_id: int) -> str:
    """Have the reviewer model review one run (``apps.runs.autoreview``); claimed once."""
    return autoreview.autoreview_execute(review_id=review_id)

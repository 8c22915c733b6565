"""Celery tasks of evaluations: thin, ids only."""

from __future__ import annotations

from celery import shared_task

from apps.evaluations import jobs, services
from apps.runs import queue


@shared_task(name=queue.EVALUATIONS_DISPATCH, ignore_result=True)
def dispatch() -> list[int]:
    """Start what running evaluations may start (beat; also after every run of theirs)."""
    return services.evaluations_dispatch()


@shared_task(name=queue.EVALUATION_JOB, acks_late=True, ignore_result=True)
def run_job(job_id: int) -> str:
    """Do evaluation job ``job_id``: an import or a submission check (claimed once)."""
    return jobs.evaluation_job_execute(job_id=job_id)


@shared_task(name="evaluations.jobs_reap", ignore_result=True)
def reap_jobs() -> list[int]:
    """Send again the jobs whose worker or message was lost (beat; and at a worker's
    start, with the runs' reap)."""
    return jobs.evaluation_jobs_reap()

"""Imports and submission checks as jobs: what the pages queue, held here, and done in
the test's own process exactly as a worker does it (``evaluation_job_execute``).

The suite's Celery worker (``celery_worker``) consumes the default queue, so a page test
that queued a job and read its page would race it: ``held_jobs`` records what the
pages send instead of sending it. Tests of the real worker do not use it.

The project's modules are imported where they are used: the suite's root conftest
imports this module before Django is set up.
"""

from __future__ import annotations

import pytest
from django.test import Client


class HeldJobs(list):
    """The ids the pages queued, in order."""

    def run(self) -> list[str]:
        """Do every held job (as a worker does), once; returns their statuses."""
        from apps.evaluations.jobs import evaluation_job_execute

        done = [evaluation_job_execute(job_id=pk) for pk in self]
        self.clear()
        return done


@pytest.fixture
def held_jobs(monkeypatch) -> HeldJobs:
    held = HeldJobs()
    monkeypatch.setattr(
        "apps.evaluations.jobs._send", lambda job_id, robust=False: held.append(job_id)
    )
    return held


def job_of(response):
    """The job a page redirected to (``/evaluations/jobs/<id>/``)."""
    from apps.evaluations.models import EvaluationJob

    assert response.status_code == 302, response.content.decode()[-3000:]
    prefix = "/evaluations/jobs/"
    assert response["Location"].startswith(prefix), response["Location"]
    return EvaluationJob.objects.get(pk=int(response["Location"][len(prefix) :].strip("/")))


def followed(client: Client, response, held: HeldJobs):
    """Do the job ``response`` redirected to, as a worker; returns it and its page."""
    job = job_of(response)
    assert held == [job.pk], "the page queued exactly its own job, by id"
    held.run()
    job.refresh_from_db()
    page = client.get(job.get_absolute_url())
    assert page.status_code == 200
    return job, page.content.decode()

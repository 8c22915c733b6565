"""Imports and submission checks are jobs on the workers: the web request stores the file
(or the choice) and returns at once; the job's page follows it to its evaluation or to
its reason for failing; a person has a limited number in flight; a job whose worker
died does not stay "running".

alice imports; bob is on her team but never sees her jobs; charlie is anonymous.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django.utils import timezone

from apps.evaluations import jobs
from apps.evaluations.imports import evaluation_import
from apps.evaluations.models import Evaluation, EvaluationJob
from apps.runs.models import Run, RunEvent
from tests.conftest import start_celery_worker, stop_celery_worker
from tests.support.evaluations import results_file
from tests.support.jobs import followed, job_of
from tests.test_project import run_python


def upload(client: Client, data: bytes, *, filename: str = "results.json", **fields):
    upload = SimpleUploadedFile(filename, data, content_type="application/json")
    return client.post("/evaluations/import/", {"file": upload, **fields})


def telecom_file(simulations: int) -> bytes:
    """``simulations`` short telecom conversations τ² re-scores by replaying each one in
    a fresh environment (the kind of file the issue's 2,285-simulation import was)."""
    from tau2_env.engine import catalog

    tasks = list(catalog.get_domain("telecom").splits["full"])[:simulations]
    data = results_file(domain="telecom", simulations=simulations)
    for sim, task_id in zip(data["simulations"], tasks, strict=True):
        sim.update(
            task_id=task_id,
            trial=0,
            termination_reason="user_stop",
            messages=[
                {"role": "assistant", "content": "Hi! How can I help?", "turn_idx": 0},
                {"role": "user", "content": "My data is down. ###STOP###", "turn_idx": 1},
            ],
        )
    return json.dumps(data).encode()


def test_the_request_only_queues_the_import_and_rescores_nothing(
    alice, alice_client, held_jobs, monkeypatch
):
    rescored = []
    monkeypatch.setattr(
        "apps.evaluations.imports.rescore", lambda **kw: rescored.append(kw) or None
    )
    data = telecom_file(3)

    response = upload(alice_client, data, name="telecom (3)")

    job = job_of(response)
    assert rescored == []  # not one simulation re-scored in the request
    assert not Evaluation.objects.exists() and not Run.objects.exists()
    assert held_jobs == [job.pk]  # its id, and nothing else, for a worker
    assert (job.kind, job.status, job.created_by, job.name) == (
        "import",
        "queued",
        alice,
        "telecom (3)",
    )
    assert bytes(job.upload) == data and job.size == len(data) and job.filename == "results.json"
    page = alice_client.get(job.get_absolute_url()).content.decode()
    assert 'data-status="queued"' in page and "Waiting for a worker." in page
    assert f'hx-get="{job.get_absolute_url()}" hx-trigger="every 2s"' in page  # it polls
    fragment = alice_client.get(job.get_absolute_url(), headers={"HX-Request": "true"})
    assert fragment.content.decode().startswith('<div id="job-status"')


@pytest.mark.slow
def test_the_job_on_a_real_worker_makes_the_same_evaluation_as_an_import_in_the_request(
    alice, alice_client, celery_worker
):
    data = telecom_file(12)
    before = evaluation_import(user=alice, data=data, name="in the request")

    response = upload(alice_client, data, name="on a worker")
    job = job_of(response)
    deadline = time.monotonic() + 120
    while job.status in jobs.IN_FLIGHT and time.monotonic() < deadline:
        time.sleep(0.2)
        job.refresh_from_db()

    assert job.status == "done", job.error
    after = job.evaluation
    assert after.name == "on a worker" and after.created_by == alice
    same = (
        "status",
        "domain",
        "split",
        "task_ids",
        "agent_model",
        "user_model",
        "num_trials",
        "seed",
        "trial_seeds",
        "max_steps",
        "max_errors",
    )
    assert {f: getattr(after, f) for f in same} == {f: getattr(before, f) for f in same}
    summary_after = {k: v for k, v in after.summary.items() if k != "computed_at"}
    assert summary_after == {k: v for k, v in before.summary.items() if k != "computed_at"}
    report = dict(after.provenance["import"])
    assert report.pop("repeats") == {str(before.pk): 12}  # the same simulations, named so
    expected = {k: v for k, v in before.provenance["import"].items() if k != "repeats"}
    assert report == expected

    def runs(evaluation):
        return sorted(
            (
                r.task.task_id,
                r.trial,
                r.reward,
                r.provenance["rescore"]["status"],
                r.n_messages,
                r.provenance["simulation_hash"],
            )
            for r in evaluation.runs.select_related("task")
        )

    assert runs(after) == runs(before) and len(runs(after)) == 12
    assert RunEvent.objects.filter(run__evaluation=after).count() == 24
    page = alice_client.get(job.get_absolute_url()).content.decode()
    assert "Imported 12 simulations; τ² scored 12 of them again." in page
    assert f'href="{after.get_absolute_url()}" data-testid="job-evaluation"' in page


@override_settings(TAU2_EVAL_JOBS_PER_PERSON=2)
def test_a_person_has_at_most_the_limit_of_jobs_in_flight_and_is_told_why(
    alice, alice_client, bob_client, held_jobs
):
    data = json.dumps(results_file()).encode()
    first, second = job_of(upload(alice_client, data)), job_of(upload(alice_client, data))

    refused = upload(alice_client, data)

    assert refused.status_code == 429
    body = refused.content.decode()
    assert 'data-testid="import-error"' in body
    assert (
        "You have 2 imports or submission checks waiting or running, and one person may "
        "have 2 at once here: try again when one of them has ended."
    ) in body
    assert 'data-testid="jobs-in-flight"' in body and first.get_absolute_url() in body
    assert EvaluationJob.objects.filter(created_by=alice).count() == 2
    assert held_jobs == [first.pk, second.pk]
    # bob's own limit is his.
    assert job_of(upload(bob_client, data)).created_by.username == "bob"
    held_jobs.run()
    # Once hers ended, alice may import again.
    assert job_of(upload(alice_client, data)).status == "queued"


def test_a_job_that_fails_inside_says_so_in_words_and_stores_nothing(
    alice, alice_client, held_jobs, monkeypatch
):
    def broken(*args, **kwargs):
        raise RuntimeError("psycopg.OperationalError: the database went away")

    monkeypatch.setattr(RunEvent.objects, "bulk_create", broken)

    job, page = followed(alice_client, upload(alice_client, telecom_file(2)), held_jobs)

    assert job.status == "failed" and job.error == jobs.INTERNAL_ERROR
    assert "The server failed while doing this" in page and "nothing was stored" in page
    assert "psycopg" not in page and "RuntimeError" not in page
    assert not Evaluation.objects.exists() and not Run.objects.exists()


def test_only_alice_sees_her_jobs_page(alice, alice_client, bob_client, held_jobs):
    job = job_of(upload(alice_client, json.dumps(results_file()).encode()))

    assert alice_client.get(job.get_absolute_url()).status_code == 200
    assert bob_client.get(job.get_absolute_url()).status_code == 404
    fragment = bob_client.get(job.get_absolute_url(), headers={"HX-Request": "true"})
    assert fragment.status_code == 404
    assert Client().get(job.get_absolute_url()).status_code == 404
    assert alice_client.get("/evaluations/jobs/999999/").status_code == 404


def test_a_job_whose_lease_ran_out_is_sent_again_once_then_failed_on_the_next_look(
    alice, alice_client, held_jobs
):
    job = job_of(upload(alice_client, json.dumps(results_file()).encode()))
    held_jobs.clear()
    past = timezone.now() - timedelta(seconds=1)
    EvaluationJob.objects.filter(pk=job.pk).update(
        status="running", attempts=1, lease_expires_at=past
    )

    page = alice_client.get(job.get_absolute_url()).content.decode()

    assert 'data-status="queued"' in page and held_jobs == [job.pk]  # sent again
    EvaluationJob.objects.filter(pk=job.pk).update(
        status="running", attempts=2, lease_expires_at=past
    )
    page = alice_client.get(job.get_absolute_url()).content.decode()
    assert 'data-status="failed"' in page and jobs.LOST_TWICE in page
    assert held_jobs == [job.pk]  # not sent a third time
    job.refresh_from_db()
    assert bytes(job.upload) == b"" and job.finished_at is not None


@pytest.mark.slow
def test_an_import_whose_worker_is_killed_is_taken_up_again_and_finishes(
    alice, alice_client, held_jobs, scripted_llm_session
):
    from tau2site.celery import app

    job = job_of(upload(alice_client, telecom_file(400)))
    held_jobs.clear()
    worker = start_celery_worker(
        llm=scripted_llm_session,
        queue="tau2-test-jobs-kill",
        name="jobs-kill",
        extra_env={"TAU2_EVAL_JOB_LEASE_SECONDS": "6"},
    )
    try:
        app.send_task("evaluations.job", args=[job.pk], queue="tau2-test-jobs-kill")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            job.refresh_from_db()
            if job.status == "running" and job.progress_done > 0:
                break
            time.sleep(0.1)
        assert job.status == "running" and job.progress_done < job.progress_total == 400
        os.kill(worker.pid, signal.SIGKILL)  # as the OOM killer or a lost machine would
        worker.wait(timeout=10)
    finally:
        stop_celery_worker(worker)

    # Its lease was 6 s: on the first look after it ran out the job is sent again (to the
    # workers' queue: held here), and then done to the end.
    job.refresh_from_db()
    lease_end = job.lease_expires_at
    time.sleep(max(0.0, (lease_end - timezone.now()).total_seconds()) + 0.5)
    page = alice_client.get(job.get_absolute_url()).content.decode()
    assert 'data-status="queued"' in page and held_jobs == [job.pk]
    held_jobs.run()
    job.refresh_from_db()
    assert job.status == "done" and job.attempts == 2
    assert Evaluation.objects.count() == 1 and job.evaluation.runs.count() == 400


@pytest.mark.slow
def test_in_the_embedded_default_the_web_process_does_the_job_itself(tmp_path):
    """SQLite and the in-process worker (no REDIS_URL, DEBUG on): the page queues the job
    on the in-memory broker and the web process's own worker thread imports the file."""
    data = tmp_path / "results.json"
    data.write_text(json.dumps(results_file(simulations=1)))
    result = run_python(
        f"""
        import time
        import django; django.setup()
        from django.core.files.uploadedfile import SimpleUploadedFile
        from django.core.management import call_command
        from django.contrib.auth import get_user_model
        from django.test import Client
        from apps.evaluations.models import EvaluationJob
        from apps.tasks.services import catalogue_load
        from tau2site import embedded_worker

        call_command("migrate", verbosity=0)
        catalogue_load(domains=["airline"])
        alice = get_user_model().objects.create_user(username="alice")
        client = Client()
        client.force_login(alice)
        assert embedded_worker.start()
        upload = SimpleUploadedFile("results.json", open({str(data)!r}, "rb").read())
        response = client.post("/evaluations/import/", {{"file": upload}})
        print(response.status_code, response["Location"])
        job = EvaluationJob.objects.get()
        deadline = time.monotonic() + 90
        while job.status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.2)
            job.refresh_from_db()
        print(job.status, job.error, job.evaluation.runs.count() if job.evaluation else None)
        page = client.get(job.get_absolute_url()).content.decode()
        print('data-testid="job-evaluation"' in page)
        embedded_worker.stop()
        """,
        DEBUG="true",
        TAU2_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-4000:]
    lines = result.stdout.strip().splitlines()[-3:]
    assert lines[0].startswith("302 /evaluations/jobs/"), result.stdout
    assert lines[1:] == ["done  1", "True"], result.stdout + result.stderr[-3000:]

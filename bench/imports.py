"""The web request of a large ``tau2 run`` results import, and the work behind it.

Run by hand, against a database of your own (it is migrated and given τ²'s catalogue):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/tau2_bench \\
    REDIS_URL=redis://127.0.0.1:6379/13 .venv/bin/python bench/imports.py [--simulations 2285]

It writes a telecom results file of ``--simulations`` simulations, one per task of the
``full`` split (2,285 tasks: 1.7 MB; the issue's file of as many was 2.5 MB, longer
conversations), each a short conversation (the agent greets, the customer answers and
stops) that τ² re-scores by replaying it in a fresh telecom environment. Then, signed in
as a bench person through Django's test client (in this process, so the time is the
view's own, with no network), it opens the import form once (the process's one-time
loading), then POSTs the file to ``/evaluations/import/`` ``--requests`` times and
prints each request's wall time and the process's CPU during it.

When the request only queues a job (``apps.evaluations.jobs``), the job is then done
here, in this process, as a worker does it, and its time is printed too; the rows it
made are deleted after each round.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/imports.py
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tau2site.settings")
os.environ.setdefault("TAU2_ENV_FILE", "")
os.environ.setdefault("ALLOWED_HOSTS", "testserver")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault(
    "DJANGO_SECRET_KEY", "bench-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
)
os.environ.setdefault("TAU2_VAULT_KEYS", "N3uZF8m7DxGjISnnXFZbWKgVJn9hg-w_PPTB7gok6yA=")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.files.uploadedfile import SimpleUploadedFile  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.test import Client  # noqa: E402

from apps.evaluations.models import Evaluation  # noqa: E402
from apps.tasks.services import catalogue_load  # noqa: E402
from tau2_env.engine import catalog  # noqa: E402

try:  # the job flow (after issue 30); absent before it
    from apps.evaluations import jobs
    from apps.evaluations.models import EvaluationJob
except ImportError:  # pragma: no cover - the "before" measurement
    jobs = EvaluationJob = None


def telecom_file(simulations: int) -> bytes:
    """A τ² results file of ``simulations`` short telecom conversations (one per task of
    the ``full`` split, in its order, then round again)."""
    tasks = list(catalog.get_domain("telecom").splits["full"])
    sims = []
    for i in range(simulations):
        sims.append(
            {
                "id": f"bench-{i:05d}",
                "task_id": tasks[i % len(tasks)],
                "start_time": "2026-01-01T00:00:00",
                "end_time": "2026-01-01T00:00:05",
                "duration": 5.0,
                "termination_reason": "user_stop",
                "reward_info": {"reward": 0.0},
                "agent_cost": 0.0012,
                "user_cost": 0.0004,
                "messages": [
                    {
                        "role": "assistant",
                        "content": "Hi! How can I help you with your phone line today?",
                        "turn_idx": 0,
                        "cost": 0.0012,
                        "usage": {"prompt_tokens": 812, "completion_tokens": 14},
                    },
                    {
                        "role": "user",
                        "content": "My mobile data stopped working this morning. ###STOP###",
                        "turn_idx": 1,
                        "cost": 0.0004,
                        "usage": {"prompt_tokens": 402, "completion_tokens": 13},
                    },
                ],
                "trial": i // len(tasks),
                "seed": 300,
            }
        )
    return json.dumps(
        {
            "timestamp": "2026-01-01T00:00:00",
            "info": {
                "git_commit": "bench",
                "num_trials": max(1, -(-simulations // len(tasks))),
                "max_steps": 200,
                "max_errors": 10,
                "user_info": {"implementation": "user_simulator", "llm": "gpt-4.1"},
                "agent_info": {"implementation": "llm_agent", "llm": "openai/bench-agent"},
                "environment_info": {"domain_name": "telecom", "policy": "", "tool_defs": None},
                "seed": 300,
            },
            "tasks": [],
            "simulations": sims,
        }
    ).encode()


def cpu() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulations", type=int, default=2285)
    parser.add_argument("--requests", type=int, default=3)
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    catalogue_load(domains=["telecom"])
    person, _ = get_user_model().objects.get_or_create(username="bench-importer")
    client = Client()
    client.force_login(person)
    data = telecom_file(args.simulations)
    print(f"file: {args.simulations} telecom simulations, {len(data) / 1e6:.2f} MB")
    # The person opens the form first: the process's one-time loading is not the POST's.
    warm = time.perf_counter()
    assert client.get("/evaluations/import/").status_code == 200
    print(f"the import form (first request of this process): {time.perf_counter() - warm:.3f} s")

    for i in range(args.requests):
        upload = SimpleUploadedFile("bench.json", data, content_type="application/json")
        wall, used = time.perf_counter(), cpu()
        response = client.post("/evaluations/import/", {"file": upload})
        wall, used = time.perf_counter() - wall, cpu() - used
        print(
            f"request {i + 1}: HTTP {response.status_code} → {response.get('Location', '')} "
            f"in {wall:.3f} s wall, {used:.3f} s CPU"
        )
        if EvaluationJob is not None:
            job = EvaluationJob.objects.filter(created_by=person).latest("pk")
            started = time.perf_counter()
            jobs.evaluation_job_execute(job_id=job.pk)
            job.refresh_from_db()
            print(
                f"  the job on a worker: {job.status} in {time.perf_counter() - started:.1f} s "
                f"({job.error or job.evaluation})"
            )
            EvaluationJob.objects.filter(created_by=person).delete()
        made = Evaluation.objects.filter(created_by=person)
        print(f"  evaluations made: {[(e.pk, e.runs.count()) for e in made]}")
        made.delete()


if __name__ == "__main__":
    main()

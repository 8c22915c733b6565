"""Stored runs and reviewers for the review tests (pages and browser).

``stored_run`` writes a finished airline run with a short conversation straight to the
database (no worker, no LLM): review reads what is stored. ``staff_member`` is a reviewer
by the default rule (staff), without the admin's permissions.
"""

from __future__ import annotations


def staff_member(username: str = "stella"):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=username, is_staff=True)


def stored_run(user, *, task_id="27", status="completed", reward=1.0, messages=2):
    """A run of airline ``task_id`` by ``user`` with ``messages`` messages, the agent's
    (even ``seq``) and the customer's (odd) alternating, each saying ``line <seq>``."""
    from apps.runs.models import Run, RunEvent
    from apps.tasks.models import Task

    run = Run.objects.create(
        task=Task.objects.get(domain_id="airline", task_id=task_id),
        domain="airline",
        created_by=user,
        agent_model="org/model-a",
        user_model="u/m",
        status=status,
        reward=reward,
        error="provider refused" if status == Run.Status.FAILED else "",
        n_messages=messages,
    )
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run,
            seq=seq,
            kind="agent" if seq % 2 == 0 else "customer",
            message={"role": "assistant" if seq % 2 == 0 else "user", "content": f"line {seq}"},
        )
        for seq in range(messages)
    )
    return run

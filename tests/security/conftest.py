"""What the security tests act on: alice's work (a running model run, a play session, an
evaluation), and the people who try: charlie (anonymous), bob (another member), stella
(staff, and superuser as ``grant_staff`` makes her)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.support.people import person, signed_in


@pytest.fixture
def staff(committed_db):
    user = person("stella", "hf_oauth_stella_0011223344556677")
    user.is_staff = user.is_superuser = True
    user.save(update_fields=["is_staff", "is_superuser"])
    return user


@pytest.fixture
def work(alice):
    """alice's running model run, open play session and evaluation (with one run)."""
    from apps.runs.models import Run
    from apps.tasks.models import Task
    from tests.support.evaluations import stored_evaluation

    task = Task.objects.get(domain_id="airline", task_id="27")
    common = {"task": task, "domain": "airline", "created_by": alice, "user_model": "u/m"}
    run = Run.objects.create(**common, agent_model="org/model-a", status=Run.Status.RUNNING)
    play = Run.objects.create(
        **common,
        kind=Run.Kind.HUMAN,
        agent_model="human",
        status=Run.Status.RUNNING,
        play_phase=Run.PlayPhase.YOUR_TURN,
    )
    evaluation = stored_evaluation(alice, outcomes={"0": [1.0]}, status="running")
    return {"run": run, "play": play, "evaluation": evaluation}


@pytest.fixture
def clients(bob, staff) -> dict[str, Client]:
    """One client per person who is not alice."""
    return {"anonymous": Client(), "bob": signed_in(bob), "staff": signed_in(staff)}

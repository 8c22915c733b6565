"""Runs and forks on banking_knowledge (τ² 1.x): a model run keeps its retrieval
configuration, and a fork of it goes on in an environment built the same way (its
history, knowledge-tool calls included, replays there)."""

from __future__ import annotations

import pytest

from apps.runs.forks import run_fork
from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.scripts import (
    AGENT_MODEL,
    BANKING_TASK,
    banking_agent_tools,
    banking_script,
    finished,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.upstream]

DOMAIN, TASK = BANKING_TASK


def test_a_fork_of_a_grep_only_run_replays_its_grep_calls_and_scores(
    celery_worker, llm_server, alice
):
    banking_script(llm_server)
    run = run_create(
        user=alice,
        task=Task.objects.get(domain_id=DOMAIN, task_id=TASK),
        spec=RunSpec(agent=Side(AGENT_MODEL), seed=300, retrieval_config="grep_only"),
    )
    run = wait_for(run, finished, timeout=120)
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.retrieval_config == "grep_only" and run.reward == 1.0
    grep_call = run.events.filter(kind="agent").order_by("seq")[1]
    assert grep_call.message["tool_calls"][0]["name"] == "grep"

    # From the agent's answer after the grep: the prefix holds the grep call and result.
    at = grep_call.seq + 2
    llm_server.requests.clear()
    fork = wait_for(run_fork(run=run, at_seq=at, by=alice), finished, timeout=120)

    assert fork.retrieval_config == "grep_only"
    assert fork.status == Run.Status.COMPLETED, fork.error
    assert fork.reward == 1.0
    # τ² 1.x replays only writes, so the column alone would not show a lost configuration:
    # the fork's agent is offered grep_only's tools, as its parent was.
    offered = banking_agent_tools(llm_server)
    assert "grep" in offered and "KB_search" not in offered

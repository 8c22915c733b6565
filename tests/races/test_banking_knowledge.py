"""A race on banking_knowledge (τ² 1.x): the retrieval configuration chosen on the race
form is every lane's, and lanes race to τ²'s reward with the agent's knowledge tool."""

from __future__ import annotations

import pytest

from apps.races.models import Race
from apps.races.selectors import race_runs
from apps.runs.models import Run
from tests.support.races import CUSTOMER, EXTRA, FAST
from tests.support.scripts import (
    BANKING_TASK,
    banking_agent_tools,
    banking_script,
    finished,
    refresh_agent_models,
)
from tests.support.scripts import wait_for as wait_for_run

pytestmark = [pytest.mark.slow, pytest.mark.upstream]

DOMAIN, TASK = BANKING_TASK


def test_a_banking_race_runs_every_lane_with_the_chosen_configuration(
    committed_db, celery_worker, llm_server, alice, alice_client
):
    refresh_agent_models()
    banking_script(llm_server)
    form = alice_client.get(f"/races/new/?domain={DOMAIN}&task={TASK}").content.decode()
    assert 'data-testid="retrieval-config"' in form

    response = alice_client.post(
        "/races/new/",
        {
            "domain": DOMAIN,
            "task_id": TASK,
            "agent_model": [FAST, EXTRA],
            "user_model": CUSTOMER,
            "max_steps": 30,
            "seed": 11,
            "retrieval_config": "grep_only",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    race = Race.objects.get()
    lanes = list(race_runs(race))
    assert len(lanes) == 2 and {r.retrieval_config for r in lanes} == {"grep_only"}
    for run in lanes:
        run = wait_for_run(run, finished, timeout=120)
        assert run.status == Run.Status.COMPLETED, run.error
        assert run.reward == 1.0
    agent_tools = banking_agent_tools(llm_server)
    assert "grep" in agent_tools and "KB_search" not in agent_tools

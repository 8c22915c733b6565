"""A run of an ablation keeps its mode when run again, and is not offered for forking
(τ² plays it with another agent and user, whose conversation a fork cannot take over)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from apps.runs import forks
from apps.runs.models import Run
from tests.support.review import stored_run


def test_an_ablation_run_is_run_again_in_its_mode_and_never_forked(alice, alice_client):
    run = stored_run(alice, messages=4)
    Run.objects.filter(pk=run.pk).update(mode=Run.Mode.ORACLE_PLAN)
    run.refresh_from_db()
    assert run.spec.mode == Run.Mode.ORACLE_PLAN
    with pytest.raises(ValidationError, match="Oracle plan ablation cannot be forked"):
        forks.fork_point(run=run, at_seq=2)
    assert forks.fork_context(alice, run)["can_fork"] is False
    page = alice_client.get(f"/runs/{run.pk}/fork/?at=2")
    assert page.status_code == 400 and "cannot be forked" in page.content.decode()


def test_a_run_in_a_mode_names_taus_classes_of_that_mode(alice):
    from apps.runs.services import model_run_build, run_in_mode
    from apps.runs.spec import RunSpec, Side

    run = stored_run(alice, messages=2)
    spec = RunSpec(
        agent=Side("org/model-a"),
        customer=Side("u/m"),
        max_steps=10,
        seed=300,
        mode=Run.Mode.NO_USER,
    )
    again = run_in_mode(
        model_run_build(user=alice, task=run.task, spec=spec, trial=0, trial_seed=1, prices=None)
    )
    assert again.mode == Run.Mode.NO_USER
    assert again.provenance["agent"]["implementation"] == "tau2.agent.llm_agent.LLMSoloAgent"
    assert again.provenance["user"]["implementation"] == "tau2.user.user_simulator.DummyUser"

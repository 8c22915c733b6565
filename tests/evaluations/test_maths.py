"""An evaluation's numbers are τ²'s: trial seeds, success and pass^k."""

from __future__ import annotations

import random

import pytest

# isort: off
from tau2_env.llm._tau2 import registry  # noqa: F401
from tau2.data_model.simulation import Results, RewardInfo, SimulationRun
from tau2.metrics.agent_metrics import compute_metrics as tau2_compute_metrics

# isort: on
from tau2_env.engine import catalog
from tau2_env.engine.evaluation import compute_metrics, is_successful, pass_hat_k, trial_seeds


def tau2_seeds(seed: int, num_trials: int) -> list[int]:
    """What `tau2 run` does (tau2/run.py, run_tasks), on the global generator."""
    state = random.getstate()
    try:
        random.seed(seed)
        return [random.randint(0, 1000000) for _ in range(num_trials)]
    finally:
        random.setstate(state)


@pytest.mark.parametrize("seed", [300, 0, 7, 42, 123456789])
def test_trial_seeds_are_derived_as_tau2_run_derives_them(seed):
    assert trial_seeds(seed, 8) == tau2_seeds(seed, 8)


def test_tau2_runs_default_seed_gives_626729_first():
    assert trial_seeds(300, 4)[0] == 626729


def _results(domain: str, outcomes: dict[str, list[float]]) -> Results:
    """A τ² results file holding ``outcomes`` (task id → each trial's reward)."""
    from tau2.data_model.simulation import (
        AgentInfo,
        Info,
        TerminationReason,
        UserInfo,
    )
    from tau2.environment.environment import EnvironmentInfo
    from tau2.utils.utils import get_now

    num_trials = max(len(v) for v in outcomes.values())
    info = Info(
        git_commit="test",
        num_trials=num_trials,
        max_steps=200,
        max_errors=10,
        user_info=UserInfo(implementation="user_simulator", llm="u", llm_args={}),
        agent_info=AgentInfo(implementation="llm_agent", llm="a", llm_args={}),
        environment_info=EnvironmentInfo(domain_name=domain, policy="p", tool_defs=None),
        seed=300,
    )
    simulations = [
        SimulationRun(
            id=f"{task_id}-{trial}",
            task_id=task_id,
            start_time=get_now(),
            end_time=get_now(),
            duration=1.0,
            termination_reason=TerminationReason.USER_STOP,
            reward_info=RewardInfo(reward=reward),
            agent_cost=0.01,
            user_cost=0.0,
            messages=[],
            trial=trial,
            seed=trial,
        )
        for task_id, rewards in outcomes.items()
        for trial, reward in enumerate(rewards)
    ]
    tasks = [catalog.get_tau2_task(domain, task_id) for task_id in outcomes]
    return Results(info=info, tasks=tasks, simulations=simulations)


@pytest.mark.parametrize("case", range(25))
def test_pass_hat_k_equals_tau2s_metrics_over_random_outcomes(case):
    rng = random.Random(case)
    ids = list(catalog.get_domain("airline").splits["test"])
    tasks = rng.sample(ids, rng.randint(1, 8))
    num_trials = rng.randint(1, 6)
    choices = [1.0, 0.0, 1.0 - 5e-7, 0.5]  # 1 − 5e-7 is a success within τ²'s tolerance
    outcomes = {t: [rng.choice(choices) for _ in range(num_trials)] for t in tasks}

    ours = compute_metrics(outcomes)
    theirs = tau2_compute_metrics(_results("airline", outcomes))

    assert ours.avg_reward == pytest.approx(theirs.avg_reward)
    assert set(ours.pass_hat_ks) == set(theirs.pass_hat_ks)
    for k, value in theirs.pass_hat_ks.items():
        assert ours.pass_hat_ks[k] == pytest.approx(value)


def test_success_is_a_reward_within_tau2s_tolerance_of_one():
    assert is_successful(1.0) and is_successful(1 - 1e-7) and is_successful(1 + 1e-7)
    assert not is_successful(0.999) and not is_successful(None) and not is_successful(0.0)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)

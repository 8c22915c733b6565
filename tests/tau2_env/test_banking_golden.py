"""Golden replays of banking_knowledge (τ² 1.x): every one of its 97 tasks scores in the
engine as τ² scores the same trajectory.

As for the other domains (``test_faithfulness.py``): each task's expected actions are
played through the engine — the customer-side ones (applying for a card, a discoverable
user tool) by the scripted customer when the agent asks, must-tell information with
``respond_to_user`` — then ``done``, with the default retrieval configuration (bm25).
The episode's ``reward_info`` must equal τ²'s own ``evaluate_simulation`` of the same
messages, given the environment arguments τ²'s own ``tau2 run`` builds for the task
(``tau2.runner.build._build_env_kwargs``), and the reward must be 1.0 but where τ²'s own
verdict on its own expected actions is not (:data:`NOT_GOLDEN`, each with why).
"""

from __future__ import annotations

import contextlib

import pytest

from tau2_env.engine import catalog
from tau2_env.engine.episodes import Episode
from tau2_env.llm import gateway
from tests.support.trajectories import CustomerScript, drive_engine, has_nl_judge

pytestmark = pytest.mark.upstream

DOMAIN = "banking_knowledge"
CONFIG = "bm25"
TOKEN = "hf_banking_golden_token_97"


def _tasks() -> list[str]:
    try:
        return list(catalog.get_domain(DOMAIN).splits["base"])
    except KeyError:  # τ² 0.2 has no banking_knowledge: one id the marker skips, saying why
        return ["none"]


TASKS = _tasks()

# Tasks whose expected actions, replayed, τ² itself does not score 1.0: none found.
NOT_GOLDEN: dict[str, str] = {}


def _tau2_verdict(*, task, messages, judge: gateway.Route) -> dict:
    """τ²'s own verdict on ``messages`` (an agent stop), with the environment ``tau2 run
    --domain banking_knowledge --retrieval-config bm25`` builds for the task."""
    # isort: off
    from tau2_env.llm._tau2 import registry  # noqa: F401  (τ²'s quiet import, first)
    from tau2.data_model.simulation import SimulationRun, TerminationReason, TextRunConfig
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.runner.build import _build_env_kwargs
    from tau2.utils.utils import get_now

    # isort: on
    from tau2_env.engine.episodes import messages_from_json

    simulation = SimulationRun(
        id="golden",
        task_id=task.id,
        start_time=get_now(),
        end_time=get_now(),
        duration=0.0,
        termination_reason=TerminationReason.AGENT_STOP,
        messages=messages_from_json(messages),
    )
    env_kwargs = _build_env_kwargs(TextRunConfig(domain=DOMAIN, retrieval_config=CONFIG), task)
    routes = gateway.conversation(user=judge) if has_nl_judge(task) else contextlib.nullcontext()
    with routes:
        info = evaluate_simulation(
            simulation=simulation,
            task=task,
            evaluation_type=EvaluationType.ALL,
            solo_mode=False,
            domain=DOMAIN,
            env_kwargs=env_kwargs,
        )
    return info.model_dump(mode="json")


def test_banking_knowledge_has_97_tasks():
    assert len(TASKS) == 97


@pytest.mark.slow
@pytest.mark.parametrize("task_id", TASKS)
def test_the_expected_actions_score_in_the_engine_as_tau2_scores_them(llm_server, task_id):
    task = catalog.get_tau2_task(DOMAIN, task_id)
    customer = CustomerScript(llm_server)
    route = gateway.Route(
        provider="hf", model="scripted/customer", base_url=llm_server.base_url, api_key=TOKEN
    )
    episode = Episode(domain=DOMAIN, task=task, user_llm=route, retrieval_config=CONFIG)

    drive_engine(episode, task, customer)

    assert episode.error is None
    assert episode.termination_reason.value == "agent_stop"
    ours = episode.reward_info.model_dump(mode="json")
    assert ours == _tau2_verdict(task=task, messages=episode.messages_json(), judge=route)
    assert ours["reward"] == (0.0 if task_id in NOT_GOLDEN else 1.0), ours
    # The customer's own tools really ran inside τ².
    customer_calls = [m for m in episode.messages if m.role == "tool" and m.requestor == "user"]
    expected = [a for a in task.evaluation_criteria.actions or [] if a.requestor == "user"]
    assert len(customer_calls) == len(expected)

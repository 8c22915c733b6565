"""Evaluations for tests of what reads them (downloads, leaderboard, compare, API), and
results files written by τ²'s own ``tau2 run`` against the scripted LLM.

``stored_evaluation`` writes a finished evaluation's rows directly (the runs' conversations
come from :func:`conversation`, played through the engine and scored by τ²), so these
tests need no worker; ``tests/evaluations/test_evaluations.py`` runs one end to end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.support.llm_server import ScriptedLLM, text
from tests.support.people import ALICE_TOKEN
from tests.support.tau2_cli import tau2_cli_run

AIRLINE_TEST = "test"


@dataclass(frozen=True)
class Conversation:
    """A finished conversation: τ²'s messages (JSON) and τ²'s verdict on it."""

    messages: list[dict[str, Any]]
    reward_info: dict[str, Any]

    @property
    def reward(self) -> float:
        return self.reward_info["reward"]


def conversation(llm: ScriptedLLM, *, domain: str, task_id: str, solve: bool) -> Conversation:
    """Play ``task_id`` through the engine with the scripted customer: the task's expected
    actions (``solve``) or a greeting and a goodbye; τ² scores it."""
    from tau2_env.engine import catalog, episodes
    from tau2_env.llm import gateway as routes
    from tests.support.trajectories import CustomerScript, drive_engine

    task = catalog.get_tau2_task(domain, task_id)
    episode = episodes.Episode(
        domain=domain,
        task=task,
        user_llm=routes.hf_route(model="scripted/customer", token=ALICE_TOKEN),
        nl_judge="basis",
    )
    customer = CustomerScript(llm)
    if solve:
        drive_engine(episode, task, customer)
    else:
        customer.will(text("Hi, I need some help please."))
        episode.start()
        episode.finish()
    assert episode.reward_info is not None, episode.error
    return Conversation(episode.messages_json(), episode.reward_info.model_dump(mode="json"))


def stored_evaluation(
    user,
    *,
    outcomes: dict[str, list[Any]],
    domain: str = "airline",
    split: str = AIRLINE_TEST,
    full_split: bool | None = None,
    agent_model: str = "org/agent-a",
    user_model: str = "org/customer",
    status: str = "completed",
    seed: int = 300,
    num_trials: int | None = None,
    task_set_hash: str | None = None,
    cost_usd: str | None = "0.001000",
    name: str = "",
    finished_ago: timedelta = timedelta(0),
):
    """A finished evaluation over ``outcomes``' tasks (in that order) with one completed
    run per listed outcome, trial by trial: a :class:`Conversation` (its messages become
    events), a reward (no messages), or ``"failed"`` (a failed run, not scored)."""
    from django.utils import timezone

    from apps.evaluations.models import Evaluation
    from apps.runs.events import event_kind
    from apps.runs.models import Run, RunEvent
    from apps.tasks.models import Task
    from apps.tasks.selectors import catalogue_latest
    from tau2_env.engine import catalog
    from tau2_env.engine.evaluation import trial_seeds

    task_ids = list(outcomes)
    k = num_trials or max(len(v) for v in outcomes.values())
    if full_split is None:
        full_split = set(task_ids) == set(catalog.get_domain(domain).splits.get(split, ()))
    seeds = trial_seeds(seed, k)
    now = timezone.now() - finished_ago
    latest = catalogue_latest()
    evaluation = Evaluation.objects.create(
        name=name,
        status=status,
        created_by=user,
        finished_at=now,
        domain=domain,
        split=split,
        full_split=full_split,
        task_ids=task_ids,
        agent_model=agent_model,
        user_model=user_model,
        num_trials=k,
        seed=seed,
        trial_seeds=seeds,
        max_steps=30,
        max_errors=10,
        provenance={
            "tau2_version": catalog.tau2_version(),
            "task_set_hash": task_set_hash or latest.task_set_hash,
            "source": "studio",
        },
    )
    tasks = {t.task_id: t for t in Task.objects.filter(domain_id=domain, task_id__in=task_ids)}
    for task_id, results in outcomes.items():
        for trial, outcome in enumerate(results):
            failed = outcome == "failed"
            talk = outcome if isinstance(outcome, Conversation) else None
            reward = talk.reward if talk else (None if failed else float(outcome))
            messages = talk.messages if talk else []
            run = Run.objects.create(
                task=tasks[task_id],
                domain=domain,
                created_by=user,
                agent_model=agent_model,
                user_model=user_model,
                max_steps=30,
                seed=seeds[trial],
                evaluation=evaluation,
                trial=trial,
                status=Run.Status.FAILED if failed else Run.Status.COMPLETED,
                error="scripted failure" if failed else "",
                failure=Run.Failure.TRANSIENT if failed else "",
                reward=reward,
                reward_info=None
                if failed
                else (talk.reward_info if talk else {"reward": reward, "reward_basis": ["DB"]}),
                termination_reason="user_stop" if not failed else "",
                started_at=now - timedelta(seconds=12),
                finished_at=now,
                n_messages=len(messages),
                n_tool_calls=sum(
                    len(m.get("tool_calls") or []) for m in messages if m["role"] != "tool"
                ),
                prompt_tokens=100,
                completion_tokens=20,
                cost_usd=Decimal(cost_usd) if cost_usd is not None else None,
                provenance={"args": {"seed": seed, "trial": trial, "trial_seed": seeds[trial]}},
            )
            RunEvent.objects.bulk_create(
                RunEvent(run=run, seq=seq, kind=event_kind(m), message=m)
                for seq, m in enumerate(messages)
            )
    from apps.evaluations.selectors import evaluation_metrics

    evaluation.summary = evaluation_metrics(evaluation)
    evaluation.save(update_fields=["summary"])
    return evaluation


def tau2_run_file(
    llm: ScriptedLLM,
    directory: Path,
    *,
    domain: str = "airline",
    task_ids: tuple[str, ...] = ("27", "19"),
    num_trials: int = 2,
    seed: int = 300,
    max_steps: int = 20,
) -> Path:
    """Run τ²'s own ``tau2 run`` CLI against the scripted LLM (its responder must be set)
    and return the results file it wrote.

    By default airline 27, which the gold script solves, and 19 (a cancellation it never
    makes: unsolved on τ² 0.2 and 1.0.1 alike). Both models are ``openai/…`` with
    ``api_base`` in their LLM args; the agent's key is
    τ²'s own default (``--agent-api-key`` names no variable, so the file records
    ``"api_key": "dummy_key"`` on 0.2), the customer's comes from a fake ``OPENAI_API_KEY``.
    """
    args = {"temperature": 0, "api_base": llm.base_url}
    return tau2_cli_run(
        directory,
        domain=domain,
        task_ids=task_ids,
        num_trials=num_trials,
        seed=seed,
        max_steps=max_steps,
        agent_llm="openai/scripted-agent",
        user_llm="openai/scripted-customer",
        agent_args=args,
        user_args=args,
    )


def results_file(
    *,
    domain: str = "airline",
    task_id: str = "27",
    num_trials: int = 1,
    simulations: int = 1,
    **info: Any,
) -> dict[str, Any]:
    """A small, well-formed τ² results file (as a dict) for tests of refused files: its
    simulations are empty conversations that ended on an agent error (reward 0)."""
    return {
        "timestamp": "2026-01-01T00:00:00",
        "info": {
            "git_commit": "test",
            "num_trials": num_trials,
            "max_steps": 20,
            "max_errors": 10,
            "user_info": {"implementation": "user_simulator", "llm": "openai/customer"},
            "agent_info": {"implementation": "llm_agent", "llm": "openai/agent"},
            "environment_info": {"domain_name": domain, "policy": "", "tool_defs": None},
            "seed": 300,
            **info,
        },
        "tasks": [],
        "simulations": [
            {
                "id": f"sim-{i}",
                "task_id": task_id,
                "start_time": "2026-01-01T00:00:00",
                "end_time": "2026-01-01T00:00:01",
                "duration": 1.0,
                "termination_reason": "agent_error",
                "reward_info": {"reward": 0.0},
                "messages": [],
                "trial": i,
                "seed": 1,
            }
            for i in range(simulations)
        ],
    }


def wait_for_evaluation(evaluation, predicate, *, timeout: float = 120.0):
    """Poll ``evaluation`` until ``predicate(evaluation)``; fails with its runs' states."""
    import time

    import pytest

    deadline = time.monotonic() + timeout
    while True:
        evaluation.refresh_from_db()
        if predicate(evaluation):
            return evaluation
        if time.monotonic() > deadline:
            runs = list(evaluation.runs.values_list("status", "error"))
            pytest.fail(f"evaluation {evaluation.status}: {runs}")
        time.sleep(0.2)


def older_task_set_evaluation(user, llm: ScriptedLLM, *, task_id: str = "19"):
    """An evaluation of airline ``task_id`` scored on another task set (its provenance
    names one): a conversation that solved it stored as failed on its DB check, one that
    did nothing stored as a pass, and one solved, stored as τ² scores it here."""
    solved = conversation(llm, domain="airline", task_id=task_id, solve=True)
    idle = conversation(llm, domain="airline", task_id=task_id, solve=False)
    assert (solved.reward, idle.reward) == (1.0, 0.0)
    return stored_evaluation(
        user,
        outcomes={
            task_id: [
                _as_scored_elsewhere(solved, reward=0.0, db=0.0),
                _as_scored_elsewhere(idle, reward=1.0, db=1.0),
                solved,
            ]
        },
        split="",
        task_set_hash="an-older-task-set",
        name="older",
    )


def _as_scored_elsewhere(talk: Conversation, *, reward: float, db: float) -> Conversation:
    info = dict(talk.reward_info)
    info.update(reward=reward, reward_breakdown={"DB": db, "COMMUNICATE": 1.0})
    return Conversation(talk.messages, info)

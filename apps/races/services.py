"""Starting a race: one ordinary model run per lane, all queued at once."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.races.models import MAX_LANES, MIN_LANES, Race, RaceLane
from apps.runs import services as run_services
from apps.tasks.models import Task
from tau2_env import config
from tau2_env.config import DEFAULT_MAX_STEPS
from tau2_env.engine.evaluation import DEFAULT_SEED


def lanes_validate(agent_models: list[str]) -> list[str]:
    """The picked agent models, stripped and empty ones dropped; raises ``ValidationError``
    unless there are 2 to 4, each a different one."""
    picked = [m.strip() for m in agent_models if m and m.strip()]
    if not MIN_LANES <= len(picked) <= MAX_LANES:
        raise ValidationError(
            {
                "agent_model": f"A race needs {MIN_LANES} to {MAX_LANES} agent models; "
                f"{len(picked)} {'was' if len(picked) == 1 else 'were'} picked."
            }
        )
    if len(set(picked)) != len(picked):
        raise ValidationError({"agent_model": "Pick each agent model once: lanes must differ."})
    return picked


@transaction.atomic
def race_create(
    *,
    user,
    task: Task,
    agent_models: list[str],
    agent_prices: list[tuple | None] | None = None,
    user_model: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    seed: int | None = None,
    agent_connections: list | None = None,
    user_connection=None,
    agent_llm_args: dict | None = None,
    user_llm_args: dict | None = None,
) -> Race:
    """Queue a race of ``agent_models`` (2–4, in lane order) on ``task`` by ``user``.

    Every lane is a model run made by :func:`apps.runs.services.run_create` with the same
    customer model, step limit, seed and trial 0, so the orchestrators get one trial seed
    and the customer opens every lane the same way. The workers get the runs once the
    race is committed. Lane i's agent runs on ``agent_connections[i]`` (None: the
    router), the customer on ``user_connection``; every lane has the same LLM arguments.
    """
    connections = list(agent_connections or [None] * len(agent_models))
    lanes_validate(
        [
            f"@{c.slug}/{m}" if c is not None else m
            for m, c in zip(agent_models, connections, strict=True)
        ]
    )
    agent_models = [m.strip() for m in agent_models]
    for model in agent_models:
        run_services.model_run_validate(agent_model=model, max_steps=max_steps)
    prices = list(agent_prices or [None] * len(agent_models))
    user_model = (user_model or "").strip() or config.provider_settings().model
    seed = DEFAULT_SEED if seed is None else seed
    race = Race.objects.create(
        created_by=user,
        task=task,
        user_model=user_model,
        user_connection=user_connection,
        seed=seed,
        max_steps=max_steps,
    )
    lanes = zip(agent_models, prices, connections, strict=True)
    for position, (model, price, connection) in enumerate(lanes):
        run = run_services.run_create(
            user=user,
            task=task,
            agent_model=model,
            user_model=user_model,
            max_steps=max_steps,
            seed=seed,
            agent_prices=price,
            agent_connection=connection,
            user_connection=user_connection,
            agent_llm_args=agent_llm_args,
            user_llm_args=user_llm_args,
        )
        RaceLane.objects.create(race=race, run=run, position=position)
    return race

"""Starting a race: one ordinary model run per lane, all queued at once."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.races.models import MAX_LANES, MIN_LANES, Race, RaceLane
from apps.runs import services as run_services
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task


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
    spec: RunSpec,
    lanes: list[Side],
    agent_prices: list[tuple | None] | None = None,
) -> Race:
    """Queue a race on ``task`` by ``user``: one lane per agent of ``lanes`` (2–4, in
    lane order; each a model on its route), all played with ``spec``.

    Every lane is a model run made by :func:`apps.runs.services.run_create` with
    ``spec`` and its own agent (``spec.with_agent``: every lane has the spec's agent LLM
    arguments) and trial 0, so the orchestrators get one trial seed and the customer
    opens every lane the same way. Lane i is priced ``agent_prices[i]``. The workers get
    the runs once the race is committed.
    """
    lanes_validate([lane.value for lane in lanes])
    specs = [run_services.spec_validate(spec.with_agent(lane)) for lane in lanes]
    prices = list(agent_prices or [None] * len(lanes))
    shared = specs[0]
    race = Race.objects.create(
        created_by=user,
        task=task,
        user_model=shared.customer.model,
        user_connection=shared.customer.connection,
        seed=shared.seed,
        max_steps=shared.max_steps,
    )
    for position, (lane_spec, price) in enumerate(zip(specs, prices, strict=True)):
        run = run_services.run_create(user=user, task=task, spec=lane_spec, agent_prices=price)
        RaceLane.objects.create(race=race, run=run, position=position)
    return race

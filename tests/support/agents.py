"""Outside agents with studio API keys: waiting for the runs their episodes are recorded
as (the recorder writes off the episode's thread)."""

from __future__ import annotations

import time


def agent_runs_of(user, *, count: int = 1, final: bool = True, timeout: float = 30.0) -> list:
    """The agent runs of ``user`` (oldest first) once there are ``count`` of them (and,
    with ``final``, all ended); fails on timeout with what there is."""
    from apps.runs.models import Run

    deadline = time.monotonic() + timeout
    while True:
        runs = list(Run.objects.filter(kind=Run.Kind.AGENT, created_by=user).order_by("pk"))
        if len(runs) >= count and (not final or all(r.is_final for r in runs)):
            return runs
        if time.monotonic() > deadline:
            states = [(r.pk, r.status) for r in runs]
            raise AssertionError(f"expected {count} agent runs of {user}, have {states}")
        time.sleep(0.05)

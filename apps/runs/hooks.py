"""The runs app's hooks: what the apps above it register (in their ``AppConfig.ready``)
to hear of runs or to take part in them, since runs never imports them.

* :func:`on_run_settled` — be told each time a run becomes final (the evaluations app
  lets an evaluation go on);
* :func:`on_run_moved` — be told when a run moved without ending: taken by a worker
  (queued → running) or handed back to its queue (the evaluations app tells its pages);
* :func:`fork_takeover_register` — build the run that continues a fork when a person
  takes it over (the play app makes it a play session);
* :func:`on_run_requeued` — be told when an outside agent's episode of an evaluation
  went back to its queue (its client left mid-episode);
* :func:`episode_claim_register` — hand an outside agent's client the next episode of an
  evaluation (the evaluations app does; the agents app asks, never importing it).

Light on purpose (it imports only the runs' models): an app registers its hooks at
start-up without loading τ², litellm or its own services — a hook that needs them
imports them when first called.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from apps.runs.models import Run, RunEvent
from apps.runs.spec import RunSpec

logger = logging.getLogger(__name__)

#: Called with a run that just became final (once per run), in the finishing process.
RunSettled = Callable[[Run], None]
_settled: list[tuple[str, RunSettled]] = []


def on_run_settled(name: str, hook: RunSettled) -> None:
    """Have ``hook(run)`` called each time a run becomes final. Registering ``name``
    again replaces its hook."""
    _settled[:] = [(n, h) for n, h in _settled if n != name]
    _settled.append((name, hook))


def settled_hooks() -> list[str]:
    """The names of the hooks told of a run's end, in order."""
    return [name for name, _ in _settled]


def run_settled(run: Run) -> None:
    """Tell every settled hook that ``run`` became final (``lifecycle.run_finish``). A
    hook that raises is logged: the run's end is stored already, and its failure must
    not pass for the run's own; what the hook would have done (an evaluation starting
    its next runs) is done again by the next run's end and by beat."""
    for name, hook in list(_settled):
        try:
            hook(run)
        except Exception:
            logger.exception("Run %s ended, but its %s hook failed", run.pk, name)


#: Called with a run whose status moved but is not final (taken, or handed back).
RunMoved = Callable[[Run], None]
_moved: list[tuple[str, RunMoved]] = []


def on_run_moved(name: str, hook: RunMoved) -> None:
    """Have ``hook(run)`` called each time a run is taken by a worker or handed back to
    its queue. Registering ``name`` again replaces its hook."""
    _moved[:] = [(n, h) for n, h in _moved if n != name]
    _moved.append((name, hook))


def run_moved(run: Run) -> None:
    """Tell every moved hook (``lifecycle.run_claim``, ``lifecycle.run_hand_back``); a
    hook that raises is logged, never raised: the run goes on."""
    for name, hook in list(_moved):
        try:
            hook(run)
        except Exception:
            logger.exception("Run %s moved, but its %s hook failed", run.pk, name)


class ForkTakeover(Protocol):
    """Builds the unsaved run that continues ``run`` before its message ``next_``, by
    the person ``by``, played with ``spec`` (its customer, limits and seed; the person
    plays the agent), raising ``ValidationError`` when they cannot (e.g. no token)."""

    def __call__(self, *, run: Run, by, spec: RunSpec, next_: RunEvent) -> Run: ...


_takeover: ForkTakeover | None = None


def fork_takeover_register(takeover: ForkTakeover | None) -> None:
    """Let a person take forks over, continued by ``takeover`` (``None``: nobody can)."""
    global _takeover
    _takeover = takeover


def fork_takeover() -> ForkTakeover | None:
    """How a person takes a fork over here, or ``None`` (the play app is not installed)."""
    return _takeover


#: Called with the id of a run put back in its queue (once per time).
RunRequeued = Callable[[int], None]
_requeued: list[tuple[str, RunRequeued]] = []


def on_run_requeued(name: str, hook: RunRequeued) -> None:
    """Have ``hook(run_id)`` called each time an outside agent's run goes back to its
    evaluation's queue. Registering ``name`` again replaces its hook."""
    _requeued[:] = [(n, h) for n, h in _requeued if n != name]
    _requeued.append((name, hook))


def run_requeued(run_id: int) -> None:
    """Tell every requeued hook (``lifecycle.agent_run_requeue``); a hook that raises is
    logged, never raised."""
    for name, hook in list(_requeued):
        try:
            hook(run_id)
        except Exception:
            logger.exception("Run %s went back to its queue, but its %s hook failed", run_id, name)


class EpisodeClaim(Protocol):
    """Hands a studio key's client the next episode of ``evaluation`` (as the client
    wrote its id): its run, taken for ``worker`` (RUNNING under a lease of ``lease``
    from now), and the episode's plan (``tau2_env.gate.access.EpisodePlan``). Raises
    ``tau2_env.gate.access.EpisodeRefused`` with the status a client reads: 404 no such
    evaluation of an outside agent, 403 not the key owner's, 409 paused, 410 nothing
    left, 429 every episode taken for now (``retry_after``)."""

    def __call__(
        self, *, user_id: int, evaluation: str, face: str, worker: str, lease: timedelta
    ) -> tuple[Run, Any]: ...


_claim: EpisodeClaim | None = None


def episode_claim_register(claim: EpisodeClaim | None) -> None:
    """Let outside agents pull evaluations' episodes through ``claim`` (``None``: none)."""
    global _claim
    _claim = claim


def episode_claim() -> EpisodeClaim | None:
    """How an outside agent's client pulls an evaluation's episode here, or ``None``."""
    return _claim

"""The runs app's hooks: what the apps above it register (in their ``AppConfig.ready``)
to hear of runs or to take part in them, since runs never imports them.

* :func:`on_run_settled` — be told each time a run becomes final (the evaluations app
  lets an evaluation go on);
* :func:`fork_takeover_register` — build the run that continues a fork when a person
  takes it over (the play app makes it a play session).

Light on purpose (it imports only the runs' models): an app registers its hooks at
start-up without loading τ², litellm or its own services — a hook that needs them
imports them when first called.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

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

"""What pages read of forks: a run's lineage (its parent, fork point and own forks),
whether a person may fork it here, where a comparison of one family starts.

Reads only, apart from the writes in :mod:`apps.runs.forks`, so that rendering a run
(``apps.runs.presenters``, the admin) imports no model route and none of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from apps.accounts.access import can_start
from apps.runs.models import Run, RunEvent

# Where a fork may start: a message the agent or the customer says (a tool's result
# follows from its call; fork at the call instead).
FORKABLE = (RunEvent.Kind.AGENT, RunEvent.Kind.CUSTOMER)


@dataclass(frozen=True)
class Lineage:
    """Where ``run`` comes from and what came of it: its parent and fork point (if it
    is a fork) and its own forks, oldest first."""

    parent: Run | None
    fork_seq: int | None
    children: list[Run]

    @property
    def is_fork(self) -> bool:
        return self.fork_seq is not None


def fork_lineage(run: Run) -> Lineage:
    children = list(run.forks.order_by("created_at", "id"))
    return Lineage(parent=run.parent, fork_seq=run.fork_seq, children=children)


def fork_context(user, run: Run) -> dict:
    """What the run page shows of forks: the lineage, whether ``user`` may fork ``run``
    here ("Fork here" on its messages), and which kinds of message they may fork at."""
    return {
        "lineage": fork_lineage(run),
        "can_fork": can_start(user) and run.is_final and run.mode == Run.Mode.DEFAULT,
        "kinds": [kind.value for kind in FORKABLE],
    }


def fork_compare_from(runs: list[Run]) -> int:
    """Where a comparison of ``runs`` may start: when all but one of them are forks of
    another of them (one family), their messages before the smallest fork point are the
    same in all; else 0. The aligned comparison (``apps.runs.compare``) starts there."""
    ids = {run.pk for run in runs}
    forked = [run.fork_seq for run in runs if run.parent_id in ids and run.fork_seq is not None]
    return min(forked) if forked and len(forked) == len(runs) - 1 else 0

"""Reads of races: the list, and what a race's page shows as its lanes go."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from apps.races.models import Race
from apps.runs.compare import NO_CALLS, compare_context
from apps.runs.models import Run

# While a lane is still going, "no tool call" is only so far: one may call a tool next.
NO_CALLS_YET = (
    "No lane has made a tool call yet, so there is nothing to align by: shown turn by turn "
    "until one does."
)


def race_list() -> QuerySet[Race]:
    """Every race, newest first, with its task, starter and lane count."""
    races = Race.objects.select_related("task", "created_by").annotate(n_lanes=Count("lanes"))
    return races.order_by("-created_at", "-id")


def race_runs(race: Race) -> list[Run]:
    """The race's runs in lane order."""
    return [
        lane.run
        for lane in race.lanes.select_related("run__task", "run__created_by").order_by("position")
    ]


def finish_order(runs: list[Run]) -> list[Run]:
    """The finished runs, first to finish first (by when they ended; lane breaks a tie)."""
    ended = [(run.finished_at, i, run) for i, run in enumerate(runs) if run.is_final]
    return [run for _, _, run in sorted(ended, key=lambda t: (t[0] is None, t[0], t[1]))]


def race_live(race: Race) -> dict[str, Any]:
    """The scoreboard (one line per lane: model, status, place, reward, cost) and the
    lanes aligned by expected action (``apps.runs.compare``), as they stand now."""
    runs = race_runs(race)
    places = {run.pk: place for place, run in enumerate(finish_order(runs), 1)}
    board = [{"lane": i + 1, "run": run, "place": places.get(run.pk)} for i, run in enumerate(runs)]
    done = all(run.is_final for run in runs)
    lanes = compare_context(runs)
    if not done and lanes.get("note") == NO_CALLS:
        lanes["note"] = NO_CALLS_YET
    return {"race": race, "board": board, "done": done, **lanes}

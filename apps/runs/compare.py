"""The compare page's content: 2–4 runs side by side.

Runs of one task are aligned (tau2_env.engine.alignment): one row per expected action and per
tool call, so a call a run makes and another does not stands beside a gap instead of
shifting every later turn; the talk before a call sits in that call's row. Each call is
anchored to the expected action its diagnosis says it matches or tries, the arguments a
row disagrees on are marked, and each run's column starts with its database changes and
its first divergent write. Runs of different tasks are shown turn by turn, by index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from apps.runs import diagnosis, exports, presenters
from apps.runs.models import Run
from tau2_env.engine import alignment, catalog

MAX_PATHS = 5  # changed database paths listed per run at the top of its column
RESULT_KINDS = ("tool_result", "customer_tool_result")
DIFFERENT_TASKS = (
    "These runs are of different tasks; aligning by expected action needs runs of one "
    "task, so they are shown turn by turn."
)
NO_CALLS = "These runs make no tool call, so there is nothing to align by: shown turn by turn."


@dataclass
class Unit:
    """One tool call of a run with the talk before it (events since the previous call)
    and its result; ``call`` is ``None`` for the talk after the last call."""

    talk: list[dict[str, Any]] = field(default_factory=list)
    call: dict[str, Any] | None = None
    item: alignment.Call | None = None
    result: dict[str, Any] | None = None


def compare_context(runs: list[Run], *, start: int = 0) -> dict[str, Any]:
    """What ``runs/compare.html`` shows for ``runs`` (in the order picked).

    ``start``: where a fork among them left its parent (``apps.runs.forks``); their
    messages before it are the same, so the calls are aligned from there, and the
    expected actions the shared messages already did are left out of the centre.
    """
    if len({run.task_id for run in runs}) > 1:
        return _by_index(runs, DIFFERENT_TASKS)
    columns = [_column(run, start=start) for run in runs]
    units = [c.pop("units") for c in columns]
    done = [c.pop("done") for c in columns][0]  # the same in every run
    if all(len(us) == 1 for us in units):  # talk only: nothing to align by
        return _by_index(runs, NO_CALLS)
    expected = _expected_actions(runs[0])
    if expected is not None and done:
        expected = [action for action in expected if action.anchor not in done] or None
    rows = alignment.align([[u.item for u in us if u.call] for us in units], centre=expected)
    return {
        "aligned": True,
        "columns": columns,
        "rows": _aligned_rows(rows, units, expected),
        "centred": expected is not None,
        "start": start,
    }


def _by_index(runs: list[Run], note: str) -> dict[str, Any]:
    columns = exports.compare_columns(runs)
    return {
        "aligned": False,
        "columns": columns,
        "rows": exports.compare_rows(columns),
        "note": note,
    }


def _column(run: Run, *, start: int = 0) -> dict[str, Any]:
    stored = list(run.events.order_by("seq"))
    events = [presenters.event_view(e) for e in stored]
    view = diagnosis.diagnosis_view(run, events=events)  # marks each call's trace step
    # The expected actions that the messages before ``start`` match.
    shared = _units(stored[:start], events[:start]) if start else []
    done = {u.item.anchor for u in shared if u.item is not None and u.item.anchor is not None}
    return {
        "run": run,
        "sides": presenters.side_views(run),  # where each side ran, with its llm_args
        "result": presenters.reward_view(run.reward_info),
        "diagnosis": _summary(view),
        "units": _units(stored[start:], events[start:]),
        "done": done,
    }


def _summary(view: dict | None) -> dict | None:
    """The diff summary and first divergent write at the top of a run's column."""
    if view is None or "error" in view:
        return view
    changes = view["changes"]
    return {
        "changes": len(changes),
        "paths": changes[:MAX_PATHS],
        "more": max(0, len(changes) - MAX_PATHS),
        "db_scored": view["db_scored"],
        "first_divergent": view["first_divergent"],
    }


def _units(stored: list, events: list[dict[str, Any]]) -> list[Unit]:
    """The run's events cut at its tool calls: each call with the talk before it and its
    result; a last unit (no call) with the talk after the last call."""
    units: list[Unit] = []
    by_id: dict[str, Unit] = {}
    talk: list[dict[str, Any]] = []
    for event, view in zip(stored, events, strict=True):
        if view["kind"] in RESULT_KINDS and view["result_for"] in by_id:
            by_id[view["result_for"]].result = view
            continue
        if not view["tool_calls"]:
            talk.append(view)
            continue
        if view["content"] or view["ended"] or view["reasoning"]:
            talk.append({**view, "tool_calls": []})
        raw = (event.message or {}).get("tool_calls") or []
        for call, raw_call in zip(view["tool_calls"], raw, strict=False):
            trace = call.get("trace") or {}
            anchor = trace.get("action_index") if trace.get("kind") != "missing" else None
            item = alignment.Call(
                name=call["name"] or "",
                arguments=_arguments(raw_call.get("arguments")),
                anchor=anchor if trace.get("kind") in ("match", "wrong_args") else None,
                requestor=raw_call.get("requestor") or "assistant",
            )
            unit = Unit(talk=talk, call={**call, "phone": view["kind"] == "customer"}, item=item)
            talk = []
            units.append(unit)
            if call.get("id"):
                by_id[call["id"]] = unit
    units.append(Unit(talk=talk))
    return units


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = presenters.shown_json(value)
        except ValueError:
            return {"(arguments)": value}
    return dict(value) if isinstance(value, dict) else {}


def _expected_actions(run: Run) -> list[alignment.Call] | None:
    """The task's expected actions as the alignment's centre (``None`` when the task
    left τ²'s set or expects no action)."""
    try:
        task = catalog.get_tau2_task(run.domain, run.task.task_id)
    except KeyError:
        return None
    criteria = task.evaluation_criteria
    actions = list(criteria.actions or []) if criteria is not None else []
    if not actions:
        return None
    return [
        alignment.Call(
            name=a.name, arguments=dict(a.arguments), anchor=i, requestor=a.requestor or "assistant"
        )
        for i, a in enumerate(actions)
    ]


def _aligned_rows(
    rows: list[alignment.Row], units: list[list[Unit]], expected: list[alignment.Call] | None
) -> list[dict[str, Any]]:
    calls = [[u for u in us if u.call] for us in units]
    shown = []
    for number, row in enumerate(rows, 1):
        action = expected[row.centre] if expected and row.centre is not None else None
        members = [calls[k][i] if i is not None else None for k, i in enumerate(row.cells)]
        items = [action, *(m.item if m else None for m in members)]
        differing = set(alignment.differing_args(items))
        cells = [_cell(m, differing) for m in members]
        shown.append(
            {
                "number": number,
                "expected": (
                    {"index": action.anchor + 1, "name": action.name}
                    if action is not None
                    else None
                ),
                "cells": cells,
                "differs": bool(differing)
                or any(m is None for m in members)
                or any(c["kind"] not in ("", "match") for c in cells),
            }
        )
    tails = [us[-1].talk for us in units]
    if any(tails):
        shown.append(
            {
                "number": None,
                "expected": None,
                "tail": True,
                "differs": False,
                "cells": [{"gap": False, "talk": t, "kind": ""} for t in tails],
            }
        )
    return shown


def _cell(unit: Unit | None, differing: set[str]) -> dict[str, Any]:
    if unit is None:
        return {"gap": True, "talk": [], "kind": ""}
    trace = unit.call.get("trace") or {}
    return {
        "gap": False,
        "talk": unit.talk,
        "call": unit.call,
        "result": unit.result,
        "trace": trace,
        "kind": trace.get("kind", ""),
        "divergent": bool(trace.get("divergent")),
        "args": [
            {
                "name": name,
                "value": json.dumps(value, ensure_ascii=False, default=str),
                "differs": name in differing,
            }
            for name, value in unit.item.arguments.items()
        ],
    }

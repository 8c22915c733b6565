"""A scored run's diagnosis (tau2_env.engine.diagnosis) for its page, its export and compare.

Computed when shown, not stored: it replays the run's tool calls as τ²'s scorer does
(tens of milliseconds; the expected side is cached per task by the engine), and the
result is kept in Django's cache under the run's id, its number of messages and the
τ² version, so a run that gains messages or is seen by another τ² is diagnosed again.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.cache import cache

from apps.runs.models import Run
from tau2_env.engine import catalog, diagnosis

CACHE_SECONDS = 24 * 3600


def _cache_key(run: Run, n_events: int) -> str:
    version = catalog.tau2_version().replace(" ", "_")
    return f"run-diagnosis:v1:{run.pk}:{n_events}:{version}"


def run_diagnosis(run: Run, *, messages: list[dict[str, Any]] | None = None) -> dict | None:
    """The run's diagnosis as JSON (``Diagnosis.as_json()``), ``None`` for a run with no
    score; ``{"error": ...}`` when it cannot be computed (e.g. its task left τ²'s set or
    a stored tool result is not what the replay gives). ``messages``: the run's stored
    messages, if the caller has them already."""
    if run.reward_info is None:
        return None
    if messages is None:
        messages = [e.message for e in run.events.order_by("seq")]
    key = _cache_key(run, len(messages))
    found = cache.get(key)
    if found is not None:
        return found

    try:
        task = catalog.get_tau2_task(run.domain, run.task.task_id)
        result = diagnosis.diagnose(domain=run.domain, task=task, messages=messages)
        data: dict[str, Any] = result.as_json()
    except Exception as exc:  # shown beside the verdict, which stands on its own
        data = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    cache.set(key, data, CACHE_SECONDS)
    return data


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def diagnosis_view(run: Run, *, events: list[dict[str, Any]] | None = None) -> dict | None:
    """The run's diagnosis for the templates (``None`` for a run with no score).

    Also marks each tool call of ``events`` (``presenters.event_view`` dicts) with its
    place in the trace (``call["trace"]``), so the message list shows a badge on it.
    """
    data = run_diagnosis(run)
    if data is None or "error" in data:
        return data
    steps = [
        {
            **step,
            "arguments_text": _text(step["arguments"]),
            "css": step["kind"].replace("_", "-"),
        }
        for step in data["steps"]
    ]
    by_call = {s["call_id"]: s for s in steps if s["call_id"]}
    for event in events or ():
        for call in event.get("tool_calls", ()):
            if call.get("id") in by_call:
                call["trace"] = by_call[call["id"]]
    changes = [
        {**c, "expected_text": _text(c["expected"]), "actual_text": _text(c["actual"])}
        for c in data["changes"]
    ]
    divergent = next((s for s in steps if s["divergent"]), None)
    return {
        "db_match": data["db_match"],
        "db_scored": data["db_scored"],
        "changes": changes,
        "steps": steps,
        "first_divergent": divergent,
        "missing": sum(1 for s in steps if s["kind"] == "missing"),
    }


def compare_summary(run: Run, *, events: list[dict[str, Any]] | None = None) -> dict | None:
    """Per run on compare: its number of database changes and first divergent write
    (``events`` get their badges as in :func:`diagnosis_view`)."""
    view = diagnosis_view(run, events=events)
    if view is None or "error" in view:
        return view
    return {
        "changes": len(view["changes"]),
        "db_scored": view["db_scored"],
        "first_divergent": view["first_divergent"],
    }

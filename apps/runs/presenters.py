"""Turn stored τ² messages and reward info into what run pages show."""

from __future__ import annotations

import json
from typing import Any

from django.template.loader import render_to_string

from apps.runs.models import Run, RunEvent


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, ensure_ascii=False)


def event_view(event: RunEvent) -> dict[str, Any]:
    """One event as the templates want it: who speaks, text, tool calls, tool result."""
    message = event.message or {}
    raw = message.get("raw_data") or {}
    reasoning = ""
    try:
        reasoning = raw["choices"][0]["message"].get("reasoning_content") or ""
    except (KeyError, IndexError, TypeError, AttributeError):
        reasoning = ""
    return {
        "seq": event.seq,
        "kind": event.kind,
        "content": message.get("content") or "",
        "tool_calls": [
            {"id": c.get("id"), "name": c.get("name"), "arguments": _pretty(c.get("arguments"))}
            for c in message.get("tool_calls") or []
        ],
        "result": _pretty(message.get("content")) if message.get("role") == "tool" else "",
        "result_for": message.get("id") if message.get("role") == "tool" else "",
        "error": bool(message.get("error")),
        "reasoning": reasoning,
        "latency_ms": event.latency_ms,
        "tokens": event.prompt_tokens + event.completion_tokens,
        "cost": event.cost_usd,
    }


def event_html(event: RunEvent) -> str:
    return render_to_string("includes/run_event.html", {"e": event_view(event)})


def reward_view(reward_info: dict | None) -> dict[str, Any] | None:
    """τ²'s RewardInfo, grouped for the result panel."""
    if not reward_info:
        return None
    return {
        "reward": reward_info.get("reward"),
        "basis": reward_info.get("reward_basis") or [],
        "breakdown": reward_info.get("reward_breakdown") or {},
        "db": reward_info.get("db_check"),
        "env": reward_info.get("env_assertions") or [],
        "communicate": reward_info.get("communicate_checks") or [],
        "nl": reward_info.get("nl_assertions") or [],
        "actions": reward_info.get("action_checks") or [],
    }


def status_html(run: Run, *, user, request=None) -> str:
    """The status line (and the result once final) as ``user`` may act on it."""
    return render_to_string(
        "includes/run_status.html",
        {"run": run, "result": reward_view(run.reward_info), "user": user},
        request=request,
    )

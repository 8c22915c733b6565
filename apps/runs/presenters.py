"""Turn stored τ² messages and reward info into what run pages show."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from django.template.loader import render_to_string

from apps.accounts.access import can_control
from apps.inference.pricing import money_label
from apps.runs.models import Run, RunEvent
from tau2_env import jsonbounds

# τ²'s markers that end a conversation (``tau2.user.base`` STOP, TRANSFER, OUT_OF_SCOPE;
# an agent's stop, ``tau2_env.engine.AGENT_STOP``, is STOP too), and how the page says
# what happened. They are control words, not text: as Markdown ``###STOP###`` would
# become a heading.
STOP_MARKERS = {
    "###STOP###": "ended the conversation",
    "###TRANSFER###": "asked for a transfer to a human agent",
    "###OUT-OF-SCOPE###": "ended the conversation: out of scope",
}
_MARKER_RE = re.compile("|".join(re.escape(m) for m in STOP_MARKERS))


def split_stop_marker(content: str) -> tuple[str, str]:
    """``content`` without τ²'s stop markers, and what the first one said (or ``""``)."""
    found = _MARKER_RE.search(content)
    if found is None:
        return content, ""
    return _MARKER_RE.sub("", content).strip(), STOP_MARKERS[found.group(0)]


def shown_json(text: str) -> Any:
    """``text`` read as JSON to be shown (a tool's result, a call's arguments: what a
    model, a tool or an imported file wrote), by the bounded reader; raises
    ``ValueError`` for text to show as it is — not JSON, or nested too deep to parse
    without a ``RecursionError``."""
    return jsonbounds.loads(text, max_bytes=_SHOWN_MAX_BYTES, max_int_digits=1000)


# Larger text is shown as it is, not parsed and indented.
_SHOWN_MAX_BYTES = 1024 * 1024


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = shown_json(value)
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
    content, ended = ("", "")
    if message.get("role") != "tool":
        content, ended = split_stop_marker(message.get("content") or "")
    return {
        "seq": event.seq,
        "kind": event.kind,
        "content": content,
        "ended": ended,
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
    """The status line (and the result once final) as ``user`` may act on it: Stop only
    for whoever started the run, or staff."""
    context = {
        "run": run,
        "result": reward_view(run.reward_info),
        "user": user,
        "can_stop": can_control(user, owner_id=run.created_by_id),
    }
    return render_to_string("includes/run_status.html", context, request=request)


def _role_cost(role: str, prompt: int, completion: int, cost: Decimal | None) -> dict[str, Any]:
    return {
        "role": role,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "tokens": prompt + completion,
        "cost": cost,
        "label": money_label(cost) if prompt + completion else "no calls",
    }


def cost_view(run: Run) -> dict[str, Any]:
    """What the run's LLM calls cost, split by role, and in total.

    ``roles``: the agent's and the customer's calls (tokens, cost, a label); a person
    playing the agent makes no agent calls. τ²'s NL-assertion judge is not metered: τ²'s
    evaluator does not report its tokens, so ``judged`` says only whether it ran.
    ``total``: the priced roles' sum; ``complete`` is false when a role with calls has no
    price, and ``label`` then says so (``$0.0012 + unpriced``) — never a $0 for unknown.
    """
    roles = [
        _role_cost("agent", run.prompt_tokens, run.completion_tokens, run.cost_usd),
        _role_cost(
            "customer", run.user_prompt_tokens, run.user_completion_tokens, run.user_cost_usd
        ),
    ]
    # A person or an outside agent plays the agent: its calls are not this server's.
    if run.kind in (Run.Kind.HUMAN, Run.Kind.AGENT) and not roles[0]["tokens"]:
        roles = roles[1:]
    used = [r for r in roles if r["tokens"]]
    priced = [r["cost"] for r in used if r["cost"] is not None]
    complete = len(priced) == len(used)
    total = sum(priced, Decimal(0)) if priced else None
    if not used:
        label = "no calls yet"
    elif total is None:
        label = "unpriced"
    else:
        label = money_label(total) + ("" if complete else " + unpriced")
    return {
        "roles": roles,
        "tokens": sum(r["tokens"] for r in roles),
        "total": total if complete else None,
        "priced_part": total,
        "complete": complete,
        "label": label,
        "judged": bool((run.reward_info or {}).get("nl_assertions")),
    }

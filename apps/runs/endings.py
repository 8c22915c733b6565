"""How a run ended, said to a person: the limit that ended it, a conversation gone round in
a loop, and the call a Stop waits for. Read from the run's row and its stored messages:
marks for the page, never a change to τ²'s run or its score. The loop mark is measured
once, as the run ends (``Run.loop_length``): pages read the column."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import F, OuterRef, QuerySet, Subquery

from apps.runs.models import Run, RunEvent

# τ²'s TerminationReason values that are limits: τ² scores a simulation ended so 0
# (tau2.evaluator.evaluator: "premature termination").
_LIMITS = {
    "max_steps": "τ²'s step limit ({n} steps)",
    "too_many_errors": "τ²'s error limit ({n} tool errors)",
    "timeout": "τ²'s timeout ({n} seconds of wall clock, tau2 run --timeout)",
}

# τ²'s TerminationReason values in words, both generations' (1.x added ``timeout``,
# ``infrastructure_error``, ``context_window_exceeded`` and ``unexpected_error``), and
# the studio's own ``stopped``. A value not here is shown as τ² wrote it.
ENDING_WORDS = {
    "user_stop": "the customer ended it",
    "agent_stop": "the agent ended it",
    "max_steps": "τ²'s step limit",
    "too_many_errors": "τ²'s error limit",
    "agent_error": "the agent's side failed",
    "user_error": "the customer's model failed",
    "timeout": "τ²'s time limit (--timeout)",
    "infrastructure_error": "the infrastructure failed (e.g. the API disconnected)",
    "context_window_exceeded": "a model's context window was full",
    "unexpected_error": "an unexpected error in τ²",
    # 0.2 only: its orchestrator ends a conversation whose agent repeats itself.
    "judge_stop": "τ² found the agent stuck repeating itself",
    "stopped": "stopped before its end",
}


def ending_words(reason: str) -> str:
    """``reason`` (τ²'s termination reason, or a status) said to a person, τ²'s own value
    in brackets: ``"the customer ended it (user_stop)"``."""
    words = ENDING_WORDS.get(reason)
    return f"{words} ({reason})" if words else reason


# A loop is at least this many messages repeating a cycle of at most LOOP_MAX_PERIOD.
LOOP_MIN_MESSAGES = 6
LOOP_MAX_PERIOD = 4
# Enough of a run's tail to see a loop of any period, and to say its length up to here.
LOOP_TAIL = 40


def limit_ending(run: Run) -> str:
    """``"Ended by τ²'s step limit (200 steps): τ² scores a conversation it ended so 0"``
    for a run τ² ended at a limit (its step or error limit, its timeout); ``""`` for any
    other run."""
    template = _LIMITS.get(run.termination_reason)
    if template is None:
        return ""
    n = {"max_steps": run.max_steps, "timeout": _seconds(run.timeout)}.get(
        run.termination_reason, run.max_errors
    )
    return f"Ended by {template.format(n=n)}: τ² scores a conversation it ended so 0"


def _seconds(timeout: float | None) -> str:
    """A timeout in seconds as a person reads it: ``30``, ``2.5`` (``?`` if unrecorded)."""
    return "?" if timeout is None else f"{timeout:g}"


_SPACE = re.compile(r"\s+")


def _signature(message: dict[str, Any]) -> tuple[str, str, str]:
    calls = message.get("tool_calls") or []
    called = ";".join(f"{c.get('name')}{c.get('arguments')}" for c in calls if isinstance(c, dict))
    text = _SPACE.sub(" ", str(message.get("content") or "")).strip().casefold()
    return str(message.get("role") or ""), text, called


def loop_length(messages: Sequence[dict[str, Any]]) -> int:
    """How many of the last ``messages`` repeat: the longest tail in which each message
    is the one ``p`` before it (for a cycle ``p`` of 1 to ``LOOP_MAX_PERIOD`` messages),
    counted from the cycle's first showing; 0 when that tail is shorter than
    ``LOOP_MIN_MESSAGES``, has no text, or is one side's alone."""
    signatures = [_signature(m) for m in messages]
    best = 0
    for period in range(1, LOOP_MAX_PERIOD + 1):
        i = len(signatures) - 1
        while i - period >= 0 and signatures[i] == signatures[i - period]:
            i -= 1
        length = len(signatures) - 1 - i + period
        tail = signatures[-length:] if length <= len(signatures) else []
        sides = {role for role, _, _ in tail if role in {"user", "assistant"}}
        if length >= LOOP_MIN_MESSAGES and len(sides) == 2 and any(text for _, text, _ in tail):
            best = max(best, length)
    return best


def loop_label(n: int) -> str:
    return f"looped: the last {n} messages repeat" if n else ""


def run_loop(run: Run) -> int:
    """How many of ``run``'s last messages repeat: stored as it ended
    (``Run.loop_length``), else (while it goes, or ended before the mark was stored)
    measured from its stored messages. A run tried again (an evaluation's retry) keeps
    its last end's mark until it ends anew: only a final run's is read."""
    if run.is_final and run.loop_length is not None:
        return run.loop_length
    return measured_loop(run.pk)


def measured_loop(run_id: int) -> int:
    """:func:`loop_length` of the run's stored messages (its last ``LOOP_TAIL``): what
    :func:`apps.runs.lifecycle.run_finish` stores as the run ends."""
    tail = RunEvent.objects.filter(run_id=run_id).order_by("-seq")
    messages = tail.values_list("message", flat=True)[:LOOP_TAIL]
    return loop_length(list(reversed(messages)))


def measured_loops(run_ids: Iterable[int] | QuerySet, *, events: Any = RunEvent) -> dict[int, int]:
    """``{run id: loop length}`` (0: no loop) for the runs among ``run_ids`` that have
    messages, in one query (``run_ids`` may be a queryset of ids: read as a subquery).
    ``events`` is the ``RunEvent`` model to read (a migration passes its own)."""
    ids = run_ids if isinstance(run_ids, QuerySet) else list(run_ids)
    if not isinstance(ids, QuerySet) and not ids:
        return {}
    newest = events.objects.filter(run_id=OuterRef("run_id")).order_by("-seq").values("seq")[:1]
    rows = (
        events.objects.filter(run_id__in=ids)
        .annotate(newest=Subquery(newest))
        .filter(seq__gt=F("newest") - LOOP_TAIL)
        .order_by("run_id", "seq")
    )
    tails: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for run_id, message in rows.values_list("run_id", "message").iterator():
        tails[run_id].append(message)
    return {run_id: loop_length(tail) for run_id, tail in tails.items()}


def looped_runs(runs: QuerySet[Run]) -> dict[int, int]:
    """``{run id: loop length}`` for the ``runs`` whose conversation loops: the stored
    mark of those that ended with one, measured from the messages of those without (a
    run stopped before it started has none). One query, whatever the number of runs, and
    one more while some have no mark."""
    rows = list(runs.exclude(loop_length=0).values_list("pk", "loop_length"))
    found = {run_id: n for run_id, n in rows if n}
    found.update(measured_loops([run_id for run_id, n in rows if n is None]))
    return {run_id: n for run_id, n in found.items() if n}


@dataclass(frozen=True)
class InFlight:
    """The call a running run waits for: ``side`` ("agent", "customer") since ``since``."""

    side: str
    since: datetime


def in_flight(run: Run) -> InFlight | None:
    """The LLM call ``run`` is waiting for, from its last stored message: after the agent's
    text the customer answers, after anything else the agent; since that message was
    stored (the run's start before any). ``None`` for a final run."""
    if run.is_final or run.started_at is None:
        return None
    last = run.events.order_by("-seq").first()
    if last is None:
        return InFlight(side="agent", since=run.started_at)
    message = last.message or {}
    customer_next = message.get("role") == "assistant" and not message.get("tool_calls")
    return InFlight(side="customer" if customer_next else "agent", since=last.created_at)

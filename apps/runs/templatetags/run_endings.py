"""How a run ended, for its status line: ``{{ run|limit_ending }}``, ``{{ run|run_loop }}``
(``apps.runs.endings``) and ``{{ run|in_flight }}``, the call a Stop waits for.

A fragment may be rendered without a run (the reward panel of a bare result): then
``run`` is the template's empty string and each filter says nothing."""

from django import template
from django.utils import timezone

from apps.runs import endings
from apps.runs.models import Run

register = template.Library()


@register.filter
def limit_ending(run: Run) -> str:
    return endings.limit_ending(run) if isinstance(run, Run) else ""


@register.filter
def ending_words(reason: str) -> str:
    """τ²'s termination reason in words, its value in brackets."""
    return endings.ending_words(str(reason or ""))


@register.filter
def run_loop(run: Run) -> str:
    return endings.loop_label(endings.run_loop(run)) if isinstance(run, Run) else ""


@register.filter
def in_flight(run: Run) -> dict | None:
    """``{"side", "since", "seconds"}`` of the call ``run`` waits for, or ``None``."""
    call = endings.in_flight(run) if isinstance(run, Run) else None
    if call is None:
        return None
    seconds = max(0, round((timezone.now() - call.since).total_seconds()))
    return {"side": call.side, "since": call.since, "seconds": seconds}

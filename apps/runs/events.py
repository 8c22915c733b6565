"""The event contract from worker to browser, and its one publisher.

Every change a browser must see goes through :func:`events_publish` or
:func:`status_publish`: the first persists new conversation messages as ordered
``RunEvent`` rows (``seq`` 0, 1, 2… with no gaps) and then sends each to the run's own
group ``run_<id>``; the second sends the run's status line. A consumer that (re)connects
asks for the events after the last ``seq`` it saw, so nothing is missed or shown twice.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any, Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from apps.inference.pricing import cost_usd
from apps.runs.models import Run, RunEvent

logger = logging.getLogger(__name__)


class EventMessage(TypedDict):
    """Sent to ``run_<id>`` once per batch of stored events (channel type ``run.event``):
    ``seq`` is the batch's last; a consumer reads every event after the last it sent."""

    type: Literal["run.event"]
    run_id: int
    seq: int


class StatusMessage(TypedDict):
    """Sent to ``run_<id>`` when the run's status or counters change (``run.status``)."""

    type: Literal["run.status"]
    run_id: int


class LostRun(RuntimeError):
    """This worker no longer holds the run (another took it over, or it was stopped)."""


def group_name(run_id: int) -> str:
    return f"run_{run_id}"


def event_kind(message: dict[str, Any]) -> str:
    role = message.get("role")
    if role == "tool":
        if message.get("requestor") == "user":
            return RunEvent.Kind.CUSTOMER_TOOL_RESULT
        return RunEvent.Kind.TOOL_RESULT
    if role == "user":
        return RunEvent.Kind.CUSTOMER
    return RunEvent.Kind.AGENT


def _usage(message: dict[str, Any]) -> tuple[int, int]:
    usage = message.get("usage") or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


def _send(payload: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:  # pragma: no cover - every setup configures one
        return
    try:
        async_to_sync(layer.group_send)(group_name(payload["run_id"]), payload)
    except Exception:  # a browser missing a live event reloads it from the database
        logger.exception("Could not publish %s for run %s", payload["type"], payload["run_id"])


def events_publish(
    *,
    run: Run,
    messages: list[dict[str, Any]],
    latency_ms: int | None = None,
    agent_prices: tuple[Decimal, Decimal] | None = None,
    worker: str | None = None,
) -> list[RunEvent]:
    """Store ``messages`` as the run's next events, update its counters, then publish them.

    ``agent_prices`` (USD per 1M input/output tokens) prices the agent's messages; with
    none the run's cost stays empty ("unpriced"). With ``worker`` the write happens only
    while that worker holds the run, else :class:`LostRun` is raised and nothing is stored:
    a turn is never recorded twice.
    """
    if not messages:
        return []
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run.pk)
        if worker is not None:
            locked = locked.filter(worker=worker, status=Run.Status.RUNNING)
        current = locked.first()
        if current is None:
            raise LostRun(f"run {run.pk} is no longer held by {worker}")
        start = current.n_messages
        rows, prompt, completion, tool_calls = [], 0, 0, 0
        for offset, message in enumerate(messages):
            p, c = _usage(message)
            kind = event_kind(message)
            event_cost = None
            if kind == RunEvent.Kind.AGENT:
                event_cost = cost_usd(prompt_tokens=p, completion_tokens=c, prices=agent_prices)
                prompt, completion = prompt + p, completion + c
            if message.get("role") != "tool":
                tool_calls += len(message.get("tool_calls") or [])
            rows.append(
                RunEvent(
                    run_id=run.pk,
                    seq=start + offset,
                    kind=kind,
                    message=message,
                    latency_ms=latency_ms if offset == len(messages) - 1 else None,
                    prompt_tokens=p,
                    completion_tokens=c,
                    cost_usd=event_cost,
                )
            )
        RunEvent.objects.bulk_create(rows)
        # The row is locked: plain sums are safe. Cost from the totals, not from the sum of
        # rounded per-event costs.
        update: dict[str, Any] = {
            "n_messages": start + len(rows),
            "n_tool_calls": current.n_tool_calls + tool_calls,
            "prompt_tokens": current.prompt_tokens + prompt,
            "completion_tokens": current.completion_tokens + completion,
        }
        if agent_prices is not None:
            update["cost_usd"] = cost_usd(
                prompt_tokens=update["prompt_tokens"],
                completion_tokens=update["completion_tokens"],
                prices=agent_prices,
            )
        Run.objects.filter(pk=run.pk).update(**update)
    # One message for the batch: the consumer reads every event after the last it sent,
    # then the run's status line (its counters changed with them).
    _send(EventMessage(type="run.event", run_id=run.pk, seq=rows[-1].seq))
    return rows


def status_publish(*, run_id: int) -> None:
    """Tell the run's browsers to refresh its status line (and the result, once final)."""
    _send(StatusMessage(type="run.status", run_id=run_id))

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

from django.db import transaction

from apps.connections.llm_routes import prices_of
from apps.inference.pricing import PricePair, cost_usd
from apps.inference.selectors import resolve_agent_model
from apps.runs.current_call import call_keep
from apps.runs.models import Run, RunEvent
from apps.runs.publishing import group_send
from tau2_env.gate.arguments import holds_nul
from tau2_env.llm import gateway

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


class CallMessage(TypedDict):
    """Sent to ``run_<id>`` as one of the run's LLM calls starts and ends (``run.call``):
    ``side`` ("agent", "customer", "judge"), ``phase`` (``tau2_env.llm.gateway.CallNotice``),
    its ``seconds`` so far and each attempt's ``timeout``; for ``"retrying"``, the
    ``attempt`` about to be made of at most ``attempts``, the ``reason`` the last one
    failed and the ``wait`` before the next; for ``"again"`` (the worker tries the whole
    turn again after a call whose attempts were spent), the turn's ``attempt`` of at most
    ``attempts`` and the ``wait`` before it. Not stored: a live page's passing line."""

    type: Literal["run.call"]
    run_id: int
    side: str
    phase: str
    seconds: float
    timeout: float
    attempt: int
    attempts: int
    reason: str
    wait: float


class LostRun(RuntimeError):
    """This worker no longer holds the run (another took it over, or it was stopped)."""


class UnstorableMessage(ValueError):
    """A message holds a NUL character, which PostgreSQL's text and jsonb cannot store.

    Nothing of the batch is stored: the conversation is never changed to fit (what τ²
    saw stays what is recorded), and the run ends with this readable reason instead.
    """

    def __init__(self, message: dict[str, Any]) -> None:
        who = {"assistant": "The agent model's", "user": "The customer's"}.get(
            message.get("role"), "A"
        )
        super().__init__(
            f"{who} reply contained a NUL character (\\u0000), which can't be stored; "
            "the conversation ends here rather than be changed."
        )


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


def customer_prices(run: Run) -> tuple[PricePair | None, bool]:
    """The customer model's prices (USD per 1M input/output tokens) and whether they were
    looked up just now (then the caller keeps them in the run's provenance).

    As for the agent: a pinned provider's price, the cheapest for ``:cheapest``, none
    when the router picks (or the model is not in the catalogue) — unpriced, never $0.
    The first lookup is kept, so a run is charged one price from start to end.
    """
    if run.user_prices_fixed:
        return run.user_prices, False

    try:
        prices = resolve_agent_model(run.user_model).prices
    except ValueError:
        prices = None
    return prices, True


def judge_prices(run: Run) -> PricePair | None:
    """The NL judge's prices: its own model's (``judge_model`` on its connection, or the
    router's catalogue), else the customer's, whose route it then runs on. ``None``:
    unpriced, never $0."""
    if run.judge_model:
        return prices_of(connection=run.judge_connection, model=run.judge_model)
    return customer_prices(run)[0]


def judge_fields(*, run_id: int, usage: gateway.Usage) -> dict[str, Any]:
    """The run's judge columns for ``usage`` (the judge's calls in scoring, metered by
    ``tau2_env.llm.gateway.metered``): tokens, and their cost at :func:`judge_prices` (``None``
    when unpriced). Empty when the judge made no call, so nothing is written."""
    if not usage.calls:
        return {}
    run = Run.objects.select_related("judge_connection").get(pk=run_id)
    return {
        "judge_prompt_tokens": usage.prompt_tokens,
        "judge_completion_tokens": usage.completion_tokens,
        "judge_cost_usd": cost_usd(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            prices=judge_prices(run),
        ),
    }


def embedding_fields(*, run: Run, usage: gateway.Usage) -> dict[str, Any]:
    """The run's embeddings columns for ``usage`` (its embeddings so far, metered by the
    episode as role ``embedder``): tokens, and their cost at the input price of
    ``embedding_model`` on its connection (``None`` when unpriced). Empty when it made no
    call, so nothing is written."""
    if not usage.calls:
        return {}
    prices = prices_of(connection=run.embedding_connection, model=run.embedding_model)
    return {
        "embedding_prompt_tokens": usage.prompt_tokens,
        "embedding_cost_usd": cost_usd(
            prompt_tokens=usage.prompt_tokens, completion_tokens=0, prices=prices
        ),
    }


def _send(payload: dict[str, Any]) -> None:
    try:
        group_send(group_name(payload["run_id"]), payload)
    except Exception:  # a browser missing a live event reloads it from the database
        logger.exception("Could not publish %s for run %s", payload["type"], payload["run_id"])


def events_publish(
    *,
    run: Run,
    messages: list[dict[str, Any]],
    latency_ms: int | None = None,
    attempts: list[dict[str, Any]] | None = None,
    agent_prices: tuple[Decimal, Decimal] | None = None,
    worker: str | None = None,
) -> list[RunEvent]:
    """Store ``messages`` as the run's next events, update its counters, then publish them.

    ``agent_prices`` (USD per 1M input/output tokens) prices the agent's messages; with
    none the run's agent cost stays empty ("unpriced"). The customer's messages are
    counted and priced apart (:func:`customer_prices`). With ``worker`` the write happens only
    while that worker holds the run, else :class:`LostRun` is raised and nothing is stored:
    a turn is never recorded twice.

    ``latency_ms`` and ``attempts`` (the model's time for the batch, all its attempts
    included, and those attempts when there were more than one) go on the batch's last
    message that is not a tool result: the one the model produced.
    """
    if not messages:
        return []
    timed = max(
        (i for i, m in enumerate(messages) if m.get("role") != "tool"),
        default=len(messages) - 1,
    )
    for message in messages:
        if holds_nul(message):
            raise UnstorableMessage(message)
    with transaction.atomic():
        locked = Run.objects.select_for_update().filter(pk=run.pk)
        if worker is not None:
            locked = locked.filter(worker=worker, status=Run.Status.RUNNING)
        current = locked.first()
        if current is None:
            raise LostRun(f"run {run.pk} is no longer held by {worker}")
        start = current.n_messages
        rows, prompt, completion, tool_calls = [], 0, 0, 0
        user_prompt = user_completion = 0
        user_prices, looked_up = None, False
        for offset, message in enumerate(messages):
            p, c = _usage(message)
            kind = event_kind(message)
            event_cost = None
            if kind == RunEvent.Kind.AGENT:
                event_cost = cost_usd(prompt_tokens=p, completion_tokens=c, prices=agent_prices)
                prompt, completion = prompt + p, completion + c
            elif kind == RunEvent.Kind.CUSTOMER:
                if not looked_up:
                    user_prices, fresh = customer_prices(current)
                    looked_up = True
                    if fresh:
                        current.provenance = {
                            **(current.provenance or {}),
                            "user_prices": [str(x) for x in user_prices] if user_prices else None,
                        }
                event_cost = cost_usd(prompt_tokens=p, completion_tokens=c, prices=user_prices)
                user_prompt, user_completion = user_prompt + p, user_completion + c
            if message.get("role") != "tool":
                tool_calls += len(message.get("tool_calls") or [])
            rows.append(
                RunEvent(
                    run_id=run.pk,
                    seq=start + offset,
                    kind=kind,
                    message=message,
                    latency_ms=latency_ms if offset == timed else None,
                    attempts=attempts if offset == timed and attempts else None,
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
        if looked_up:
            update["user_prompt_tokens"] = current.user_prompt_tokens + user_prompt
            update["user_completion_tokens"] = current.user_completion_tokens + user_completion
            update["provenance"] = current.provenance
            update["user_prices_fixed"] = True
            update["user_price_input"], update["user_price_output"] = user_prices or (None, None)
            if user_prices is not None:
                update["user_cost_usd"] = cost_usd(
                    prompt_tokens=update["user_prompt_tokens"],
                    completion_tokens=update["user_completion_tokens"],
                    prices=user_prices,
                )
        Run.objects.filter(pk=run.pk).update(**update)
    # One message for the batch: the consumer reads every event after the last it sent,
    # then the run's status line (its counters changed with them).
    _send(EventMessage(type="run.event", run_id=run.pk, seq=rows[-1].seq))
    return rows


def status_publish(*, run_id: int) -> None:
    """Tell the run's browsers to refresh its status line (and the result, once final)."""
    _send(StatusMessage(type="run.status", run_id=run_id))


_SIDES = {"user": "customer", "agent": "agent", "judge": "judge"}


def call_publish(*, run_id: int, notice: gateway.CallNotice) -> None:
    """Tell the run's browsers that one of its LLM calls started or ended, and keep the
    call under way for a page opened meanwhile (``apps.runs.current_call``)."""
    message = CallMessage(
        type="run.call",
        run_id=run_id,
        side=_SIDES.get(notice.role, notice.role),
        phase=notice.phase,
        seconds=round(notice.seconds, 1),
        timeout=notice.timeout,
        attempt=notice.attempt,
        attempts=notice.attempts,
        reason=notice.reason,
        wait=round(notice.wait, 1),
    )
    call_keep(run_id=run_id, message=dict(message))
    _send(dict(message))

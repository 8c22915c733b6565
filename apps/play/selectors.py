"""Reads of play sessions: whose turn it is, the player's open sessions, the tool forms.

A play session is a ``Run`` of kind ``human``. While something works on it, its
``worker`` column holds a marker (``play:customer:<nonce>``, ``play:score:<nonce>``,
``play:tool:<nonce>``, with ``@<execution>`` once a worker claimed it) and
``lease_expires_at`` says until when; everything else follows from the stored events.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from apps.play.schemas import form_schema
from apps.runs.models import Run
from apps.tasks.models import Tool
from tau2_env.engine import AGENT_STOP

CUSTOMER, SCORE, TOOL = "play:customer:", "play:score:", "play:tool:"


class Phase(StrEnum):
    """Where a session is, as the player sees it."""

    YOUR_TURN = "your_turn"  # say something, call a tool or end
    CUSTOMER = "customer"  # the customer is answering (on a worker)
    SCORING = "scoring"  # the conversation is being scored (on a worker)
    TOOL = "tool"  # one of the player's tool calls is running
    NEEDS_CUSTOMER = "needs_customer"  # the customer's turn failed or was lost: ask again
    NEEDS_SCORING = "needs_scoring"  # the conversation ended but is not scored yet
    ENDED = "ended"


REFUSALS = {
    Phase.CUSTOMER: "The customer is still answering; wait for their reply.",
    Phase.SCORING: "The conversation is being scored.",
    Phase.TOOL: "Another tool call of this session is still running.",
    Phase.NEEDS_CUSTOMER: "The customer has not answered yet; ask them again first.",
    Phase.NEEDS_SCORING: "The conversation has ended; it only needs scoring.",
    Phase.ENDED: "This conversation has ended.",
}


@dataclass(frozen=True)
class PlayState:
    phase: Phase
    error: str = ""

    @property
    def can_act(self) -> bool:
        return self.phase == Phase.YOUR_TURN

    @property
    def pending(self) -> bool:
        return self.phase in (Phase.CUSTOMER, Phase.SCORING, Phase.TOOL)

    @property
    def refusal(self) -> str:
        return REFUSALS.get(self.phase, "")


# τ²'s UserSimulator ends a conversation with one of these (UserSimulator.is_stop).
_CUSTOMER_ENDINGS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
_HELD = ((CUSTOMER, Phase.CUSTOMER), (SCORE, Phase.SCORING), (TOOL, Phase.TOOL))


def _ended(message: dict[str, Any]) -> bool:
    """True when ``message`` ends a conversation: a stop by the customer or the agent."""
    content = message.get("content") or ""
    if message.get("role") == "user" and not message.get("tool_calls"):
        return any(
            mark in content for mark in ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
        )
    return (
        message.get("role") == "assistant"
        and not message.get("tool_calls")
        and (AGENT_STOP in content)
    )


def play_state(*, run: Run, now=None) -> PlayState:
    """The session's phase from its row and its last stored message."""
    if run.is_final:
        return PlayState(Phase.ENDED, run.error)
    now = now or timezone.now()
    held = run.worker.startswith("play:") and (
        run.lease_expires_at is not None and run.lease_expires_at > now
    )
    if held:
        for prefix, phase in (
            (CUSTOMER, Phase.CUSTOMER),
            (SCORE, Phase.SCORING),
            (TOOL, Phase.TOOL),
        ):
            if run.worker.startswith(prefix):
                return PlayState(phase)
    if run.termination_reason:  # a limit was reached, or scoring failed last time
        return PlayState(Phase.NEEDS_SCORING, run.error)
    last = run.events.order_by("-seq").values_list("message", flat=True).first()
    if last is None:
        return PlayState(Phase.NEEDS_CUSTOMER, run.error)
    if _ended(last):
        return PlayState(Phase.NEEDS_SCORING, run.error)
    if last.get("role") == "assistant" and not last.get("tool_calls"):
        return PlayState(Phase.NEEDS_CUSTOMER, run.error)  # said, but no answer stored
    return PlayState(Phase.YOUR_TURN, run.error)


def play_get(*, pk: int) -> Run:
    """The play session ``pk`` (404 if there is none, or it is a model run)."""
    try:
        return Run.objects.select_related("task", "task__domain", "created_by").get(
            pk=pk, kind=Run.Kind.HUMAN
        )
    except Run.DoesNotExist:
        raise Http404(f"No play session {pk}") from None


def play_list_open(*, user) -> QuerySet[Run]:
    """``user``'s sessions that have not ended, newest first."""
    return (
        Run.objects.filter(kind=Run.Kind.HUMAN, created_by=user)
        .exclude(status__in=Run.FINAL)
        .select_related("task")
        .order_by("-created_at", "-id")
    )


def tool_forms(*, domain: str) -> list[dict[str, Any]]:
    """The agent's tools of ``domain`` as the tool form wants them, in τ²'s order:
    ``name``, ``description``, ``kind`` and a resolved ``schema`` (no ``$ref``)."""
    tools = Tool.objects.filter(domain_id=domain, requestor=Tool.Requestor.AGENT).order_by(
        "position"
    )
    return [
        {
            "name": tool.name,
            "description": tool.description,
            "kind": tool.kind,
            "schema": form_schema(tool.parameters or {"type": "object", "properties": {}}),
        }
        for tool in tools
    ]


def tool_schema(*, domain: str, name: str) -> dict[str, Any] | None:
    """τ²'s parameter schema of the agent's tool ``name`` (``None`` if there is no such tool)."""
    tool = Tool.objects.filter(domain_id=domain, requestor=Tool.Requestor.AGENT, name=name).first()
    if tool is None:
        return None
    return tool.parameters or {"type": "object", "properties": {}}

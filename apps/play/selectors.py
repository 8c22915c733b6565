"""Reads of play sessions: whose turn it is, the player's open sessions, the tool forms.

A play session is a ``Run`` of kind ``human``; where it is lives in its typed
``play_phase`` column (``Run.PlayPhase``, transitions in :mod:`apps.play.services`),
and who works on it in ``worker`` (a plain worker or request id) until
``lease_expires_at``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from apps.play.schemas import form_schema
from apps.runs.models import Run
from apps.tasks.models import Tool
from tau2_env.engine import catalog

Phase = Run.PlayPhase

# Work whose lease ran out: what the player sees instead.
_LOST = {
    Phase.CUSTOMER: Phase.NEEDS_CUSTOMER,
    Phase.SCORING: Phase.NEEDS_SCORING,
    Phase.TOOL: Phase.YOUR_TURN,
}

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


def play_state(*, run: Run, now=None) -> PlayState:
    """The session's phase as the player sees it: its column, with lost work (lease run
    out) shown as what the player may do about it."""
    if run.is_final:
        return PlayState(Phase.ENDED, run.error)
    phase = Phase(run.play_phase or Phase.YOUR_TURN)
    if phase in _LOST:
        now = now or timezone.now()
        if run.lease_expires_at is None or run.lease_expires_at <= now:
            phase = _LOST[phase]
    return PlayState(phase, run.error)


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


def _agent_tools(*, domain: str, retrieval_config: str) -> list[dict[str, Any]]:
    """The agent's tools of ``domain`` played with ``retrieval_config`` (``name``,
    ``description``, ``kind``, ``parameters``), in τ²'s order: the stored ones, but for a
    knowledge domain played with a configuration other than the stored default, whose
    knowledge tools differ (bm25's KB_search, grep_only's grep): τ²'s for it."""
    if retrieval_config and retrieval_config != catalog.default_retrieval_config(domain):
        return [
            {
                "name": t.name,
                "description": t.description,
                "kind": t.kind,
                "parameters": (t.schema.get("function") or {}).get("parameters") or {},
            }
            for t in catalog.agent_tools(domain, retrieval_config)
        ]
    tools = Tool.objects.filter(domain_id=domain, requestor=Tool.Requestor.AGENT).order_by(
        "position"
    )
    return [
        {"name": t.name, "description": t.description, "kind": t.kind, "parameters": t.parameters}
        for t in tools
    ]


def play_policy(*, run: Run) -> str:
    """The policy the session's agent reads: its domain's, or for a knowledge domain
    played with another configuration than the stored default, τ²'s for that one."""
    if run.retrieval_config and run.retrieval_config != catalog.default_retrieval_config(
        run.domain
    ):
        return catalog.agent_policy(run.domain, run.retrieval_config)
    return run.task.domain.policy


def tool_forms(*, domain: str, retrieval_config: str = "") -> list[dict[str, Any]]:
    """The agent's tools of ``domain`` (played with ``retrieval_config``) as the tool form
    wants them, in τ²'s order: ``name``, ``description``, ``kind`` and a resolved
    ``schema`` (no ``$ref``)."""
    return [
        {
            "name": tool["name"],
            "description": tool["description"],
            "kind": tool["kind"],
            "schema": form_schema(tool["parameters"] or {"type": "object", "properties": {}}),
        }
        for tool in _agent_tools(domain=domain, retrieval_config=retrieval_config)
    ]


def tool_schema(*, domain: str, name: str, retrieval_config: str = "") -> dict[str, Any] | None:
    """τ²'s parameter schema of the agent's tool ``name`` (played with
    ``retrieval_config``; ``None`` if there is no such tool)."""
    for tool in _agent_tools(domain=domain, retrieval_config=retrieval_config):
        if tool["name"] == name:
            return tool["parameters"] or {"type": "object", "properties": {}}
    return None

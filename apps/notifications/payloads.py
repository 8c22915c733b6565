"""What a webhook says: the product's JSON (:class:`Payload`, version
:data:`PAYLOAD_VERSION`), its Slack-compatible rendering, and the signature.

A payload names an evaluation and says how it went — never a key, a token, a
connection's headers or the subscription's secret: it is built from the evaluation's
columns and its stored summary only. The body is signed as
``HMAC-SHA256(secret, f"{timestamp}.".encode() + body)``, sent as
``X-Tau2-Signature: sha256=<hex>`` beside ``X-Tau2-Timestamp: <unix seconds>``
(``docs/notifications.md`` shows the receiver's check).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, Literal, TypedDict

from django.conf import settings

from apps.evaluations.models import Evaluation
from apps.evaluations.selectors import evaluation_summary_stored
from apps.notifications.models import Event

__all__ = [
    "PAYLOAD_VERSION",
    "EvaluationFacts",
    "Payload",
    "evaluation_facts",
    "payload_build",
    "render_body",
    "sign",
]

PAYLOAD_VERSION = 1

EventName = Literal[
    "evaluation.finished", "evaluation.failed", "budget.reached", "evaluation.regressed", "test"
]


class Counts(TypedDict):
    planned: int
    completed: int
    failed: int
    stopped: int
    successes: int


class EvaluationFacts(TypedDict):
    id: int
    name: str
    url: str
    domain: str
    split: str
    agent_model: str
    customer_model: str
    num_trials: int
    status: str
    pass_hat_k: dict[str, float]  # "1" → 0.62, …
    avg_reward: float | None
    counts: Counts | None
    cost_usd: str | None  # every priced call, as a decimal string; None: unpriced
    error: str


class Payload(TypedDict):
    version: int
    event: EventName
    title: str
    detail: str
    evaluation: EvaluationFacts | None
    verdict: dict[str, Any] | None


def evaluation_facts(evaluation: Evaluation) -> EvaluationFacts:
    """What a payload says of ``evaluation``: its columns and its stored summary."""
    summary = evaluation_summary_stored(evaluation)
    counts: Counts | None = None
    pass_hat_k: dict[str, float] = {}
    avg_reward = cost = None
    if summary is not None:
        counts = Counts(
            planned=summary.planned,
            completed=summary.completed,
            failed=summary.failed,
            stopped=summary.stopped,
            successes=summary.successes,
        )
        pass_hat_k = {str(k): round(float(v), 4) for k, v in sorted(summary.pass_hat_ks.items())}
        avg_reward = None if summary.avg_reward is None else round(summary.avg_reward, 4)
        cost = None if summary.total_cost_usd is None else str(summary.total_cost_usd)
    return EvaluationFacts(
        id=evaluation.pk,
        name=evaluation.name or f"Evaluation {evaluation.pk}",
        url=f"{settings.TAU2_SITE_URL}{evaluation.get_absolute_url()}",
        domain=evaluation.domain,
        split=evaluation.split,
        agent_model=evaluation.agent_model,
        customer_model=evaluation.user_model,
        num_trials=evaluation.num_trials,
        status=evaluation.status,
        pass_hat_k=pass_hat_k,
        avg_reward=avg_reward,
        counts=counts,
        cost_usd=cost,
        error=evaluation.error,
    )


_TITLES = {
    Event.FINISHED: "Evaluation finished",
    Event.FAILED: "Evaluation failed",
    Event.BUDGET: "Budget reached",
    Event.REGRESSED: "Regressed against the baseline",
    Event.TEST: "Test event",
}


def payload_build(
    *,
    event: str,
    evaluation: Evaluation | None = None,
    detail: str = "",
    verdict: dict[str, Any] | None = None,
) -> Payload:
    """The payload of ``event`` (an :class:`Event` value) about ``evaluation``."""
    facts = evaluation_facts(evaluation) if evaluation is not None else None
    title = str(_TITLES[Event(event)])
    if facts is not None:
        title = f"{title}: {facts['name']} ({facts['agent_model']} on {facts['domain']})"
    return Payload(
        version=PAYLOAD_VERSION,
        event=event,  # type: ignore[typeddict-item]
        title=title,
        detail=detail,
        evaluation=facts,
        verdict=verdict,
    )


def _slack_text(payload: Payload) -> str:
    lines = [f"*{payload['title']}*"]
    facts = payload["evaluation"]
    if facts is not None:
        scores = ", ".join(f"pass^{k} {v:.3f}" for k, v in facts["pass_hat_k"].items())
        lines.append(
            f"{facts['agent_model']} with customer {facts['customer_model']}, "
            f"{facts['domain']} × {facts['num_trials']} trial(s): {facts['status']}"
            + (f"; {scores}" if scores else "")
            + (f"; ${facts['cost_usd']}" if facts["cost_usd"] else "")
        )
    verdict = payload["verdict"]
    if verdict and (verdict.get("sentence") or verdict.get("label")):
        lines.append(str(verdict.get("sentence") or verdict.get("label")))
    if payload["detail"]:
        lines.append(payload["detail"])
    if facts is not None:
        lines.append(f"<{facts['url']}|Open the evaluation>")
    return "\n".join(lines)


def render_body(payload: Payload, *, format: str, delivery: str) -> bytes:
    """The bytes POSTed: the payload as JSON with its ``delivery`` id (``json``), or
    Slack's ``{"text": …, "blocks": […]}`` (``slack``)."""
    if format == "slack":
        text = _slack_text(payload)
        body: dict[str, Any] = {
            "text": text,
            "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": text}}],
        }
    else:
        body = {**payload, "delivery": delivery}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def sign(*, secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 with ``secret`` of ``timestamp``, a dot, and the body."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={digest.hexdigest()}"

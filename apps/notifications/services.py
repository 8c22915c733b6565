"""Writes of notifications: subscriptions (create, edit, a new secret, delete), the events
that queue deliveries, and one delivery attempt as a worker makes it.

**Emission only queues.** :func:`notify` stores one :class:`Delivery` per subscription
that wants the event and sends its id to the workers once the transaction commits
(``notifications.deliver``); it never calls a receiver. The evaluations app tells it of
its news after the commit that stored it (``apps.evaluations.hooks``), so a rolled-back
state is never announced.

**An attempt** (:func:`delivery_attempt`, on a worker) POSTs the body through the
outbound policy (``tau2_env.llm.outbound``: only allowed destinations, checked after
resolving; no redirects; the whole answer within ``TAU2_WEBHOOK_TIMEOUT``; the size cap),
signed with the subscription's secret, and logs an :class:`Attempt`. A 2xx delivers it;
anything else is tried again after the next of ``TAU2_WEBHOOK_BACKOFF``'s waits, and after
the last one it is failed. A destination the policy refuses fails at once.

The URL and the secret are sealed in the vault the moment they arrive and opened only
here, to send; neither is ever logged, put in a payload or an error.
"""

from __future__ import annotations

import logging
import secrets
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from celery import current_app
from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from apps.accounts import crypto
from apps.evaluations.baselines import verdict_for
from apps.evaluations.hooks import EvaluationNews
from apps.evaluations.models import Evaluation
from apps.notifications.models import SUBSCRIBABLE, Attempt, Delivery, Event, Subscription
from apps.notifications.payloads import Payload, payload_build, render_body, sign
from apps.notifications.selectors import can_manage
from tau2_env.llm import outbound

__all__ = [
    "DELIVER",
    "SECRET_PREFIX",
    "SubscriptionFields",
    "deliveries_reap",
    "delivery_attempt",
    "delivery_redeliver",
    "emit_regressed",
    "notify",
    "notify_evaluation_news",
    "subscription_create",
    "subscription_delete",
    "subscription_secret_rotate",
    "subscription_test",
    "subscription_update",
    "webhook_url_check",
]

logger = logging.getLogger(__name__)

DELIVER = "notifications.deliver"
SECRET_PREFIX = "tau2wh_"  # noqa: S105 - a prefix, no secret
USER_AGENT = "tau2-studio-webhooks/1"

_NEWS_EVENTS = {
    "finished": Event.FINISHED,
    "failed": Event.FAILED,
    "budget_reached": Event.BUDGET,
}


# ------------------------------------------------------------------ subscriptions


@dataclass(frozen=True)
class SubscriptionFields:
    """What a person sets on a subscription, as the form reads it. ``url`` empty on an
    update keeps the one there."""

    name: str
    url: str = ""
    events: Sequence[str] = ()
    format: str = Subscription.Format.JSON
    active: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", (self.name or "").strip()[:80])
        object.__setattr__(self, "url", (self.url or "").strip())
        object.__setattr__(self, "events", tuple(dict.fromkeys(self.events)))


def webhook_url_check(value: str) -> str:
    """``value`` as a webhook's target URL, or ``ValidationError`` saying what is wrong:
    http(s) with a host, no user or password in it, and a destination the outbound
    policy allows now (it is checked again at every attempt)."""
    value = (value or "").strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError("Enter the receiver's URL, e.g. https://example.org/hooks/tau2.")
    if parts.username or parts.password:
        raise ValidationError("Put no user or password in the URL.")
    try:
        outbound.check_url(value)
    except outbound.DestinationRefused as exc:
        # In the words the connections form uses for an endpoint people type.
        raise ValidationError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
    return value


def _shown(url: str) -> str:
    """``https://hooks.slack.com/…``: the scheme and host, never the path or query (a
    chat webhook's path is its credential)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    rest = "/…" if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{parts.hostname}{port}{rest}"


def _check_fields(fields: SubscriptionFields, *, creating: bool) -> None:
    if not fields.name:
        raise ValidationError({"name": "A subscription needs a name."})
    if creating and not fields.url:
        raise ValidationError({"url": "Enter the receiver's URL."})
    if fields.url:
        try:
            webhook_url_check(fields.url)
        except ValidationError as exc:
            raise ValidationError({"url": exc.messages}) from None
    unknown = [e for e in fields.events if e not in SUBSCRIBABLE]
    if unknown:
        raise ValidationError({"events": f"Unknown event {unknown[0]!r}."})
    if not fields.events:
        raise ValidationError({"events": "Choose at least one event."})
    if fields.format not in Subscription.Format.values:
        raise ValidationError({"format": f"Unknown format {fields.format!r}."})


def _new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def subscription_create(
    *, by, fields: SubscriptionFields, team: bool = False
) -> tuple[Subscription, str]:
    """A new subscription by ``by``: theirs, or the team's (staff only). Returns it and
    its secret, in the clear this once (only its ciphertext is kept)."""
    if team and not getattr(by, "is_staff", False):
        raise PermissionDenied("Only staff add team notifications; add a personal one instead.")
    _check_fields(fields, creating=True)
    secret = _new_secret()
    subscription = Subscription.objects.create(
        name=fields.name,
        owner=None if team else by,
        url_enc=crypto.seal(fields.url),
        url_shown=_shown(fields.url),
        secret_enc=crypto.seal(secret),
        events=list(fields.events),
        format=fields.format,
        active=fields.active,
        created_by=by,
    )
    return subscription, secret


def _check_manager(*, subscription: Subscription, by) -> None:
    if not can_manage(by, subscription):
        raise PermissionDenied("You may not change this subscription.")


def subscription_update(*, by, subscription: Subscription, fields: SubscriptionFields):
    """Change ``subscription`` (its URL only when ``fields.url`` is given)."""
    _check_manager(subscription=subscription, by=by)
    _check_fields(fields, creating=False)
    subscription.name = fields.name
    subscription.events = list(fields.events)
    subscription.format = fields.format
    subscription.active = fields.active
    update = ["name", "events", "format", "active"]
    if fields.url:
        subscription.url_enc = crypto.seal(fields.url)
        subscription.url_shown = _shown(fields.url)
        update += ["url_enc", "url_shown"]
    subscription.save(update_fields=update)
    return subscription


def subscription_secret_rotate(*, by, subscription: Subscription) -> str:
    """A new secret for ``subscription`` (the old one stops signing at once); returns it,
    in the clear this once."""
    _check_manager(subscription=subscription, by=by)
    secret = _new_secret()
    subscription.secret_enc = crypto.seal(secret)
    subscription.secret_rotated_at = timezone.now()
    subscription.save(update_fields=["secret_enc", "secret_rotated_at"])
    return secret


def subscription_delete(*, by, subscription: Subscription) -> None:
    """Delete ``subscription`` and its delivery log."""
    _check_manager(subscription=subscription, by=by)
    subscription.delete()


# ------------------------------------------------------------------ events → deliveries


def _send_later(delivery_id: int) -> None:
    transaction.on_commit(lambda: current_app.send_task(DELIVER, args=[delivery_id]))


def notify(
    *,
    event: str,
    user_id: int | None,
    evaluation: Evaluation | None = None,
    detail: str = "",
    occurrence: str = "",
    verdict: dict[str, Any] | None = None,
) -> list[Delivery]:
    """Queue ``event`` for every active subscription that wants it: the team's, and
    ``user_id``'s own (the evaluation's starter, or who tried to start one). An
    evaluation's event reaches a subscription once per ``occurrence``. Returns the
    deliveries made (a repeat makes none)."""
    subscriptions = _wanted(event, user_id=user_id)
    if not subscriptions:
        return []
    payload = payload_build(event=event, evaluation=evaluation, detail=detail, verdict=verdict)
    made = []
    with transaction.atomic():
        for subscription in subscriptions:
            if evaluation is None:
                delivery = Delivery.objects.create(
                    subscription=subscription, event=event, payload=payload
                )
            else:
                delivery, created = Delivery.objects.get_or_create(
                    subscription=subscription,
                    event=event,
                    evaluation=evaluation,
                    occurrence=occurrence,
                    defaults={"payload": payload},
                )
                if not created:
                    continue
            made.append(delivery)
            _send_later(delivery.pk)
    logger.info("%s: %d webhook deliveries queued", event, len(made))
    return made


def notify_evaluation_news(news: EvaluationNews) -> list[Delivery]:
    """The evaluations' news (``apps.evaluations.hooks``) as webhook deliveries; an
    evaluation that finished worse than its baseline is also "regressed"."""
    evaluation = None
    if news.evaluation_id is not None:
        evaluation = Evaluation.objects.filter(pk=news.evaluation_id).first()
        if evaluation is None:
            return []
    made = notify(
        event=_NEWS_EVENTS[news.kind],
        user_id=news.user_id,
        evaluation=evaluation,
        detail=news.detail,
        occurrence=news.occurrence,
    )
    if news.kind == "finished" and evaluation is not None:
        made += _regressed_if_worse(evaluation)
    return made


def _wanted(event: str, *, user_id: int | None) -> list[Subscription]:
    """The active subscriptions to ``event`` that ``user_id``'s evaluations reach (the
    team's, and the person's own). The event is matched here, not in SQL: a JSON list's
    containment is PostgreSQL's (SQLite, the laptop's database, refuses it), and a
    server holds a handful of subscriptions."""
    mine = Subscription.objects.filter(active=True).filter(
        Q(owner__isnull=True) | Q(owner_id=user_id)
    )
    return [subscription for subscription in mine if event in (subscription.events or ())]


def _regressed_if_worse(evaluation: Evaluation) -> list[Delivery]:
    """ "Regressed" when the baseline verdict of ``evaluation`` is worse (judged only when
    some subscription wants it: the paired bootstrap takes a moment)."""
    if not _wanted(Event.REGRESSED, user_id=evaluation.created_by_id):
        return []
    verdict = verdict_for(evaluation)
    if verdict is None or not verdict.regression:
        return []
    return emit_regressed(evaluation, verdict.as_json())


def emit_regressed(evaluation: Evaluation, verdict_payload: dict[str, Any]) -> list[Delivery]:
    """Queue "regressed against baseline" for ``evaluation`` with the baseline verdict's
    fields (``verdict_payload``: JSON-able, as ``apps.evaluations.baselines.Verdict.as_json``
    gives them: outcome, baseline, pass^k on both sides, the difference and its interval,
    the tasks that flipped, costs per run, a sentence). Once per evaluation, end and
    baseline."""
    baseline = verdict_payload.get("baseline") or ""
    return notify(
        event=Event.REGRESSED,
        user_id=evaluation.created_by_id,
        evaluation=evaluation,
        detail=str(verdict_payload.get("sentence") or ""),
        occurrence=f"{evaluation.finished_at.isoformat() if evaluation.finished_at else ''}"
        f"/{baseline}",
        verdict=verdict_payload,
    )


def subscription_test(*, by, subscription: Subscription) -> Delivery:
    """Queue a test event to ``subscription`` (the page's "Send a test event")."""
    _check_manager(subscription=subscription, by=by)
    payload: Payload = payload_build(
        event=Event.TEST,
        detail=f"A test of the subscription “{subscription.name}” from τ²-bench studio.",
    )
    delivery = Delivery.objects.create(subscription=subscription, event=Event.TEST, payload=payload)
    _send_later(delivery.pk)
    return delivery


def delivery_redeliver(*, by, delivery: Delivery) -> Delivery:
    """Send ``delivery`` again (same id and body), with a fresh round of attempts. One
    waiting or being sent is left as it is."""
    _check_manager(subscription=delivery.subscription, by=by)
    changed = Delivery.objects.filter(
        pk=delivery.pk, status__in=(Delivery.Status.DELIVERED, Delivery.Status.FAILED)
    ).update(status=Delivery.Status.PENDING, attempts=0, next_attempt_at=None)
    if changed:
        _send_later(delivery.pk)
    delivery.refresh_from_db()
    return delivery


# ------------------------------------------------------------------ one attempt


# A message may come a little before its time (clocks): it is not early by this much.
EARLY = timedelta(seconds=1)
# A delivery whose message seems lost (reaper): this long past when it was due.
OVERDUE = timedelta(seconds=60)


def _stale_claim(now: datetime) -> datetime:
    """Before this, a claim was left by a worker that died: its attempt's deadline and a
    minute have passed."""
    return now - timedelta(seconds=settings.TAU2_WEBHOOK_TIMEOUT) - OVERDUE


def _claim(delivery_id: int) -> bool:
    """One UPDATE decides: of two workers holding messages of the same delivery, one
    sends, and only once its next attempt is due (a duplicate or early message finds
    nothing to do). A claim left by a worker that died is taken again later."""
    now = timezone.now()
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + EARLY)
    return bool(
        Delivery.objects.filter(pk=delivery_id)
        .filter(
            (Q(status=Delivery.Status.PENDING) & due)
            | Q(status=Delivery.Status.SENDING, claimed_at__lt=_stale_claim(now))
        )
        .update(status=Delivery.Status.SENDING, claimed_at=now, attempts=F("attempts") + 1)
    )


def deliveries_reap() -> list[int]:
    """Send again the deliveries whose worker or message was lost (beat): claimed by a
    worker that died, or waiting more than a minute past their time. Returns their ids."""
    now = timezone.now()
    lost = Delivery.objects.filter(
        Q(status=Delivery.Status.SENDING, claimed_at__lt=_stale_claim(now))
        | Q(status=Delivery.Status.PENDING, next_attempt_at__lt=now - OVERDUE)
        | Q(
            status=Delivery.Status.PENDING,
            next_attempt_at__isnull=True,
            created_at__lt=now - OVERDUE,
        )
    )
    ids = list(lost.values_list("pk", flat=True)[:500])
    for pk in ids:
        current_app.send_task(DELIVER, args=[pk])
    if ids:
        logger.warning("%d webhook deliveries sent again (lost worker or message)", len(ids))
    return ids


def _in_words(exc: BaseException, *, timeout: float) -> tuple[str, bool]:
    """(what happened, whether trying again cannot help) for a failed POST; never the
    URL beyond its host."""
    current: BaseException | None = exc
    while current is not None:
        if isinstance(current, outbound.DestinationRefused):
            return f"{current}", True
        if isinstance(current, outbound.DeadlineExceeded):
            return f"no complete answer within {timeout:g} s", False
        if isinstance(current, outbound.OutboundError):
            return f"{current}", False
        if isinstance(current, socket.gaierror):
            return "no such host", False
        current = current.__cause__ or current.__context__
    if isinstance(exc, httpx.TimeoutException):
        return f"no complete answer within {timeout:g} s", False
    if isinstance(exc, httpx.ConnectError):
        return "could not connect (refused, or no such host)", False
    return f"{type(exc).__name__}: the request could not be completed", False


def _status_words(code: int) -> str:
    if 300 <= code < 400:
        return f"HTTP {code}: a redirect, which webhooks do not follow"
    return f"HTTP {code}"


def _post(subscription: Subscription, delivery: Delivery) -> tuple[int | None, str, bool]:
    """POST ``delivery`` once: (status code or None, error in words, give up now)."""
    timeout = settings.TAU2_WEBHOOK_TIMEOUT
    try:
        url = crypto.unseal(subscription.url_enc)
        secret = crypto.unseal(subscription.secret_enc)
    except crypto.InvalidToken:
        return None, "no vault key opens this subscription's URL or secret: edit it", True
    uid = str(delivery.uid)
    body = render_body(delivery.payload, format=subscription.format, delivery=uid)
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Tau2-Event": delivery.event,
        "X-Tau2-Delivery": uid,
        "X-Tau2-Timestamp": timestamp,
        "X-Tau2-Signature": sign(secret=secret, timestamp=timestamp, body=body),
    }
    try:
        response = outbound.client().post(url, content=body, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        error, final = _in_words(exc, timeout=timeout)
        return None, error, final
    except Exception as exc:  # whatever else: logged and tried again, never stuck "sending"
        logger.warning("webhook delivery %s: %s", uid, type(exc).__name__)
        return None, f"{type(exc).__name__}: the request could not be made", False
    ok = 200 <= response.status_code < 300
    return response.status_code, "" if ok else _status_words(response.status_code), False


def delivery_attempt(*, delivery_id: int) -> float | None:
    """Make one attempt of delivery ``delivery_id`` if it waits for one (claimed once),
    log it, and return the seconds to wait before the next, or ``None`` when there is no
    next (delivered, failed, or another worker has it). Returns within about
    ``TAU2_WEBHOOK_TIMEOUT`` seconds, whatever the receiver does."""
    if not _claim(delivery_id):
        return None
    delivery = Delivery.objects.select_related("subscription").get(pk=delivery_id)
    subscription = delivery.subscription
    started = time.monotonic()
    at = timezone.now()
    code, error, final = _post(subscription, delivery)
    duration_ms = int((time.monotonic() - started) * 1000)
    ok = code is not None and not error
    number = Attempt.objects.filter(delivery=delivery).count() + 1
    Attempt.objects.create(
        delivery=delivery,
        number=number,
        at=at,
        ok=ok,
        status_code=code,
        error=error[:500],
        duration_ms=duration_ms,
    )
    backoff = settings.TAU2_WEBHOOK_BACKOFF
    now = timezone.now()
    wait: float | None = None
    if ok:
        fields = {"status": Delivery.Status.DELIVERED, "delivered_at": now}
    elif final or delivery.attempts > len(backoff):
        fields = {"status": Delivery.Status.FAILED}
    else:
        wait = backoff[delivery.attempts - 1]
        fields = {
            "status": Delivery.Status.PENDING,
            "next_attempt_at": now + timedelta(seconds=wait),
        }
    Delivery.objects.filter(pk=delivery.pk, status=Delivery.Status.SENDING).update(
        claimed_at=None, **fields
    )
    logger.info(
        "webhook delivery %s (subscription %s, %s) attempt %d: %s in %d ms",
        delivery.uid,
        subscription.pk,
        delivery.event,
        number,
        code if ok else (f"{code}" if code else "no answer"),
        duration_ms,
    )
    return wait

"""Notifications: webhooks a person (or staff, for the team) subscribes to evaluations'
events with, and every delivery of one with each attempt.

A :class:`Subscription` is personal (``owner``: it hears of the evaluations its owner
starts) or the team's (no ``owner``: it hears of every evaluation on this server, and
staff manage it, as they manage team connections). Its target URL and its shared secret
are sealed in the token vault (``apps.accounts.crypto``): a Slack or chat webhook's URL
is itself a credential. Pages show the URL's host only; the secret is shown once, when
it is made.

A :class:`Delivery` is one event for one subscription: what is sent (``payload``, never
a secret), the ``X-Tau2-Delivery`` id, and where it is::

    PENDING → SENDING (a worker claimed an attempt) → DELIVERED (2xx)
                                                  → PENDING (to be tried again later)
                                                  → FAILED (the last attempt failed)
    DELIVERED or FAILED → PENDING ("redeliver", the same id)

Each try is an :class:`Attempt`: the HTTP status or the error in words, and how long it
took.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import reverse

from apps.accounts import crypto


class Event(models.TextChoices):
    """What a subscription may hear of (``test``: the page's "Send a test event")."""

    FINISHED = "evaluation.finished", "evaluation finished"
    FAILED = "evaluation.failed", "evaluation failed"
    BUDGET = "budget.reached", "budget reached"
    REGRESSED = "evaluation.regressed", "regressed against baseline"
    TEST = "test", "test event"


SUBSCRIBABLE = (Event.FINISHED, Event.FAILED, Event.BUDGET, Event.REGRESSED)


class Subscription(models.Model):
    class Format(models.TextChoices):
        JSON = "json", "JSON (τ²-bench studio's own)"
        SLACK = "slack", 'Slack-compatible ({"text": …})'

    name = models.CharField(max_length=80)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="webhook_subscriptions",
        help_text="Empty: the team's (every evaluation; staff manage it).",
    )
    url_enc = models.TextField(help_text="Fernet ciphertext of the target URL; never shown.")
    url_shown = models.CharField(
        max_length=300, help_text="The URL's scheme and host, e.g. https://hooks.slack.com/…"
    )
    secret_enc = models.TextField(help_text="Fernet ciphertext of the signing secret.")
    events = models.JSONField(default=list, help_text="The events it hears of (Event values).")
    format = models.CharField(max_length=8, choices=Format.choices, default=Format.JSON)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    secret_rotated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<Subscription {self.pk} {self.url_shown}>"

    def get_absolute_url(self) -> str:
        return reverse("notifications:detail", args=[self.pk])

    @property
    def is_team(self) -> bool:
        return self.owner_id is None

    def event_labels(self) -> list[str]:
        return [str(Event(e).label) for e in self.events if e in Event.values]


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "waiting"
        SENDING = "sending", "sending"
        DELIVERED = "delivered", "delivered"
        FAILED = "failed", "failed"

    WAITING = (Status.PENDING, Status.SENDING)

    subscription = models.ForeignKey(
        Subscription, on_delete=models.CASCADE, related_name="deliveries"
    )
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    event = models.CharField(max_length=32, choices=Event.choices)
    evaluation = models.ForeignKey(
        "evaluations.Evaluation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    occurrence = models.CharField(max_length=64, blank=True)
    payload = models.JSONField(help_text="What is sent, in the product's JSON; no secret.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    claimed_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # An evaluation's event reaches a subscription once per occurrence.
            models.UniqueConstraint(
                fields=["subscription", "event", "evaluation", "occurrence"],
                condition=Q(evaluation__isnull=False),
                name="delivery_once_per_occurrence",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event} → {self.subscription_id} ({self.status})"


class Attempt(models.Model):
    """One POST of a delivery: ``status_code`` (None: no answer) or ``error`` in words."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveSmallIntegerField()
    at = models.DateTimeField()
    ok = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["delivery", "number", "id"]

    def __str__(self) -> str:
        return f"attempt {self.number} of delivery {self.delivery_id}"


# What manage.py rotate_vault_keys re-encrypts.
crypto.sealed_fields_register("notifications.Subscription", "url_enc", "secret_enc")

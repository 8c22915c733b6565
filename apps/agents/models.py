"""Studio API keys: what lets an outside agent play on its owner's account."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiKey(models.Model):
    """A studio API key: lets an agent (an OpenEnv or MCP client) play episodes on its
    owner's Hugging Face token, recorded in the team's history.

    The key itself (``tau2s_<key_id>_<secret>``) is shown once, at creation; only its
    SHA-256 is kept. ``key_id`` is not secret: it finds the row, and the hash is then
    compared in constant time. Life: created → revoked (``revoked_at`` set, final).

    ``max_sessions``: the sessions the key may hold at once, set when it is made (a
    trainer's key: one per generation of a batch), at most ``TAU2_SESSIONS_PER_KEY_MAX``;
    such a key's sessions count against its own cap alone. Without one (``None``) they
    count with its owner's other keys and browser sessions against
    ``TAU2_SESSIONS_PER_CLIENT``.

    ``scope``: what the key may do as its owner. ``start`` (read and start): play
    episodes on the agent faces, read the JSON API, and start and control evaluations
    through it; every key made before scopes existed has it, so none lost what it could
    do. ``read``: the JSON API's reads only (the faces refuse it: an episode spends).
    """

    class Scope(models.TextChoices):
        READ = "read", "read only"
        START = "start", "read and start"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    key_id = models.CharField(max_length=16, unique=True, help_text="Not secret: finds the key.")
    secret_hash = models.CharField(
        max_length=64, help_text="SHA-256 of the whole key; never shown."
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    max_sessions = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Sessions at once, set when the key is made; empty: the per-person default.",
    )
    scope = models.CharField(
        max_length=8,
        choices=Scope.choices,
        default=Scope.START,
        help_text="read: the JSON API's reads; start: also episodes and evaluations.",
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"
        db_table = "accounts_apikey"  # made by accounts' migration 0002, before it moved here
        constraints = [
            models.CheckConstraint(condition=~models.Q(name=""), name="apikey_has_a_name"),
            models.CheckConstraint(
                condition=models.Q(secret_hash__regex=r"^[0-9a-f]{64}$"),  # noqa: S106
                name="apikey_secret_is_a_sha256",
            ),
            models.CheckConstraint(
                condition=models.Q(max_sessions__isnull=True) | models.Q(max_sessions__gte=1),
                name="apikey_max_sessions_at_least_one",
            ),
            models.CheckConstraint(
                condition=models.Q(scope__in=["read", "start"]), name="apikey_scope_known"
            ),
        ]

    def __str__(self) -> str:
        return f"API key {self.name!r} of {self.user}"

    def __repr__(self) -> str:
        return f"<ApiKey key_id={self.key_id} user_id={self.user_id} revoked={self.is_revoked}>"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None

    @property
    def may_start(self) -> bool:
        """True when the key may start work (episodes, evaluations), not only read."""
        return self.scope == self.Scope.START

    @property
    def shown_prefix(self) -> str:
        """What the profile page shows to recognise the key (its non-secret part)."""
        return f"tau2s_{self.key_id}_…"

"""The token vault's one row per person: their Hugging Face OAuth tokens, encrypted.

Only ``apps.accounts.vault`` decrypts these fields; everything else (admin, logs, reprs)
sees the metadata only.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

INFERENCE_SCOPE = "inference-api"


class HFCredential(models.Model):
    """A person's Hugging Face OAuth tokens, Fernet-encrypted with ``TAU2_VAULT_KEYS``.

    Life: created or replaced at each sign-in; refreshed in place (the refresh token
    rotates) by the vault; ``revoked_at`` is set when Hugging Face refuses the refresh
    token, after which only a new sign-in (which clears it) makes the row usable again.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hf_credential"
    )
    access_token_enc = models.TextField(help_text="Fernet ciphertext; never shown.")
    refresh_token_enc = models.TextField(blank=True, help_text="Fernet ciphertext; never shown.")
    expires_at = models.DateTimeField(null=True, blank=True)
    scopes = models.JSONField(default=list, blank=True)
    signed_in_at = models.DateTimeField(default=timezone.now)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refresh_count = models.PositiveIntegerField(default=0)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "Hugging Face credential"
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(access_token_enc=""), name="hfcredential_has_access_token"
            ),
        ]

    def __str__(self) -> str:
        return f"Hugging Face credential of {self.user}"

    def __repr__(self) -> str:
        # Never the ciphertexts either: they are useless without the key, but logs stay clean.
        return f"<HFCredential user_id={self.user_id} expires_at={self.expires_at}>"

    @property
    def has_inference_scope(self) -> bool:
        return INFERENCE_SCOPE in (self.scopes or [])

    def expires_within(self, seconds: int, *, now=None) -> bool:
        """True when the access token expires in less than ``seconds`` (unknown expiry: never)."""
        if self.expires_at is None:
            return False
        return self.expires_at - (now or timezone.now()) < timedelta(seconds=seconds)

    def is_expired(self, *, now=None) -> bool:
        return self.expires_within(0, now=now)


class ApiKey(models.Model):
    """A studio API key: lets an agent (an OpenEnv or MCP client) play episodes on its
    owner's Hugging Face token, recorded in the team's history.

    The key itself (``tau2s_<key_id>_<secret>``) is shown once, at creation; only its
    SHA-256 is kept. ``key_id`` is not secret: it finds the row, and the hash is then
    compared in constant time. Life: created → revoked (``revoked_at`` set, final).
    """

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

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API key"
        constraints = [
            models.CheckConstraint(condition=~models.Q(name=""), name="apikey_has_a_name"),
            models.CheckConstraint(
                condition=models.Q(secret_hash__regex=r"^[0-9a-f]{64}$"),  # noqa: S106
                name="apikey_secret_is_a_sha256",
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
    def shown_prefix(self) -> str:
        """What the profile page shows to recognise the key (its non-secret part)."""
        return f"tau2s_{self.key_id}_…"

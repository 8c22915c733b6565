"""The token vault's one row per person: their Hugging Face OAuth tokens, encrypted.

Only ``apps.accounts.vault`` decrypts these fields; everything else (admin, logs, reprs)
sees the metadata only.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from apps.accounts import crypto

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


# What manage.py rotate_vault_keys re-encrypts.
crypto.sealed_fields_register("accounts.HFCredential", "access_token_enc", "refresh_token_enc")

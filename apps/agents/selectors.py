"""Reads of studio API keys."""

from __future__ import annotations

from apps.agents.models import ApiKey


def api_keys_for(*, user) -> list:
    """``user``'s API keys, live ones first, newest first (no hash: it is never shown)."""
    keys = ApiKey.objects.filter(user_id=user.pk).defer("secret_hash")
    return sorted(keys, key=lambda k: (k.revoked_at is not None, -k.created_at.timestamp()))

"""Writes of studio API keys: create (shown once), revoke, resolve a presented key."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone

from apps.agents.models import ApiKey

logger = logging.getLogger(__name__)

API_KEY_PREFIX = "tau2s_"
API_KEYS_PER_PERSON = 20
API_KEY_TOUCH_SECONDS = 60  # last use is written at most once a minute per key


class ApiKeyRefused(Exception):
    """A presented key cannot be used; ``str()`` says why (never the key)."""


def _key_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_create(
    *, user, name: str, max_sessions: int | None = None, scope: str = ApiKey.Scope.START
) -> tuple[ApiKey, str]:
    """A new key of ``user`` named ``name``, holding at most ``max_sessions`` sessions at
    once (``None``: it shares its owner's ``TAU2_SESSIONS_PER_CLIENT``), that may
    ``scope`` (``ApiKey.Scope``: read, or read and start); returns the row
    and the key itself, which exists nowhere else (only its hash is kept): show it once.
    Raises ``ValidationError`` for an empty or long name, a cap below 1 or above
    ``TAU2_SESSIONS_PER_KEY_MAX``, or when the person has too many keys."""
    name = " ".join((name or "").split())
    if not name or len(name) > 100:
        raise ValidationError({"name": "Give the key a name (at most 100 characters)."})
    most = settings.TAU2_SESSIONS_PER_KEY_MAX
    if max_sessions is not None and not 1 <= max_sessions <= most:
        raise ValidationError(
            {"max_sessions": f"Sessions at once: from 1 to {most} (this server's maximum)."}
        )
    if scope not in ApiKey.Scope.values:
        raise ValidationError({"scope": "A key may read, or read and start."})
    if ApiKey.objects.filter(user=user, revoked_at__isnull=True).count() >= API_KEYS_PER_PERSON:
        raise ValidationError(
            {"name": f"You have {API_KEYS_PER_PERSON} keys: revoke one you no longer use first."}
        )
    key_id = secrets.token_hex(6)
    raw = f"{API_KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        user=user,
        name=name,
        key_id=key_id,
        secret_hash=_key_hash(raw),
        max_sessions=max_sessions,
        scope=scope,
    )
    logger.info(
        "User %s created API key %s (sessions: %s, scope: %s)", user.pk, key_id, max_sessions, scope
    )
    return key, raw


def api_key_revoke(*, user, pk: int) -> ApiKey:
    """Revoke ``user``'s key ``pk`` (at once: the next request with it is refused).
    Raises ``ApiKey.DoesNotExist`` when ``user`` has no such key."""
    key = ApiKey.objects.get(user=user, pk=pk)
    if key.revoked_at is None:
        ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        key.refresh_from_db(fields=["revoked_at"])
        logger.info("User %s revoked API key %s", user.pk, key.key_id)
    return key


def api_key_check(*, key_id: str) -> int:
    """Whether the key ``key_id`` still stands (asked every few seconds of an open agent
    session); returns its owner's id. Raises :class:`ApiKeyRefused` for a key revoked
    or gone, or one whose owner can no longer sign in."""
    key = ApiKey.objects.select_related("user").filter(key_id=key_id).first()
    if key is None or key.revoked_at is not None:
        raise ApiKeyRefused("This API key was revoked.")
    if not key.user.is_active:
        raise ApiKeyRefused("The owner of this API key can no longer sign in.")
    return key.user_id


def api_key_resolve(*, raw: str) -> ApiKey:
    """The live key ``raw`` is (with its ``user``), its last use noted (at most once a
    minute). Raises :class:`ApiKeyRefused` for a malformed, unknown or revoked key, or
    one whose owner can no longer sign in."""
    key_id, _, secret = (raw or "").removeprefix(API_KEY_PREFIX).partition("_")
    if not raw.startswith(API_KEY_PREFIX) or not key_id or not secret:
        raise ApiKeyRefused("Unknown API key.")
    key = ApiKey.objects.select_related("user").filter(key_id=key_id).first()
    expected = key.secret_hash if key is not None else "0" * 64
    # Compared even for an unknown id, so timing says nothing about which ids exist.
    matches = hmac.compare_digest(expected, _key_hash(raw))
    if key is None or not matches:
        raise ApiKeyRefused("Unknown API key.")
    if key.revoked_at is not None:
        raise ApiKeyRefused("This API key was revoked.")
    if not key.user.is_active:
        raise ApiKeyRefused("The owner of this API key can no longer sign in.")
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at >= timedelta(
        seconds=API_KEY_TOUCH_SECONDS
    ):
        cutoff = now - timedelta(seconds=API_KEY_TOUCH_SECONDS)
        ApiKey.objects.filter(pk=key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=cutoff)
        ).update(last_used_at=now)
        key.last_used_at = now
    return key

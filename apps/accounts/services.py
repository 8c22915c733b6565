"""Writes of the accounts app: the vault's rows, staff rights, the developer sign-in,
studio API keys."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from social_django.models import UserSocialAuth

from apps.accounts import crypto
from apps.accounts.backends import SCOPES
from apps.accounts.models import HFCredential
from apps.accounts.selectors import dev_login_enabled

logger = logging.getLogger(__name__)

DEV_USERNAME_PREFIX = "dev-"
TOKEN_FIELDS = ("access_token", "refresh_token", "id_token")


def granted_scopes(token_response: dict[str, Any]) -> list[str]:
    """The scopes a token response grants (RFC 6749 §5.1: absent means as requested)."""
    scope = token_response.get("scope")
    if not scope:
        return list(SCOPES)
    if isinstance(scope, list | tuple):
        return [str(s) for s in scope]
    return [s for s in str(scope).replace(",", " ").split() if s]


def expiry_from(token_response: dict[str, Any], *, now) -> Any:
    try:
        seconds = int(token_response.get("expires_in"))
    except (TypeError, ValueError):
        return None
    return now + timedelta(seconds=seconds)


def credential_store(*, user, token_response: dict[str, Any]) -> HFCredential:
    """Encrypt and keep the tokens of a fresh sign-in, replacing any earlier ones.

    Returns the person's credential; a revoked one becomes usable again.
    """
    now = timezone.now()
    credential, _ = HFCredential.objects.update_or_create(
        user=user,
        defaults={
            "access_token_enc": crypto.seal(token_response["access_token"]),
            "refresh_token_enc": (
                crypto.seal(token_response["refresh_token"])
                if token_response.get("refresh_token")
                else ""
            ),
            "expires_at": expiry_from(token_response, now=now),
            "scopes": granted_scopes(token_response),
            "signed_in_at": now,
            "refreshed_at": None,
            "refresh_count": 0,
            "revoked_at": None,
        },
    )
    logger.info("Stored the Hugging Face credential of user %s", user.pk)
    return credential


def social_auth_strip_tokens(*, social: UserSocialAuth) -> None:
    """Drop any token social-core put into ``extra_data`` (it stores them in plain text)."""
    extra = dict(social.extra_data or {})
    if any(field in extra for field in TOKEN_FIELDS):
        for field in TOKEN_FIELDS:
            extra.pop(field, None)
        social.extra_data = extra
        social.save(update_fields=["extra_data"])


def credential_rotate_keys() -> dict[str, int]:
    """Re-encrypt every sealed field (``crypto.sealed_fields``: Hugging Face credentials,
    connections' keys and headers, webhooks' URLs and secrets) under the first vault key;
    returns how many rows changed, by model label.

    Each row in its own transaction, locked while it is rewritten. A row that no key opens
    is left alone (and logged, by id only): a credential's owner must sign in again, a
    connection's key or a webhook's URL must be entered again.
    """
    changed: dict[str, int] = {}
    for label, fields in crypto.sealed_fields().items():
        model = apps.get_model(label)
        changed[label] = 0
        for pk in model.objects.values_list("pk", flat=True):
            with transaction.atomic():
                row = model.objects.select_for_update().get(pk=pk)
                try:
                    for field in fields:
                        value = getattr(row, field)
                        if value:
                            setattr(row, field, crypto.rotate(value))
                except crypto.InvalidToken:
                    logger.warning("No vault key opens %s %s: left as it is", label, pk)
                    continue
                row.save(update_fields=list(fields))
                changed[label] += 1
    return changed


def user_grant_staff(*, username: str, superuser: bool = True, revoke: bool = False):
    """Make ``username`` staff (and superuser), or undo it: the person who signed in with
    Hugging Face as ``username`` (case-insensitive), else — only where the developer
    sign-in exists (:func:`~apps.accounts.selectors.dev_login_enabled`: DEBUG and
    TAU2_DEV_LOGIN, a laptop) — the developer account ``dev-<name>`` of that exact name.
    In production nobody can sign in as a developer account, and none is made staff.

    Returns the user; raises ``LookupError`` saying why when there is no such person.
    """
    user = _hf_user(username) or (_dev_user(username) if dev_login_enabled() else None)
    if user is None:
        raise LookupError(_nobody(username))
    user.is_staff = not revoke
    user.is_superuser = (not revoke) and superuser
    user.save(update_fields=["is_staff", "is_superuser"])
    return user


def _hf_user(username: str):
    social = (
        UserSocialAuth.objects.select_related("user")
        .filter(provider="huggingface", extra_data__username__iexact=username)
        .first()
    )
    return social.user if social is not None else None


def _dev_user(username: str):
    """The developer account named ``username`` (``dev-<name>``) that signed in once; an
    account that signed in with Hugging Face is never one."""
    if not username.startswith(DEV_USERNAME_PREFIX):
        return None
    return (
        get_user_model()
        .objects.filter(username=username)
        .exclude(social_auth__provider="huggingface")
        .first()
    )


def _nobody(username: str) -> str:
    if dev_login_enabled():
        return (
            f"Nobody has signed in as {username!r}: neither with Hugging Face nor as that "
            f"developer account ({DEV_USERNAME_PREFIX}<name>, as the page header shows it). "
            "Ask them to sign in once, then run this again."
        )
    hint = (
        " Developer accounts are made staff only where the developer sign-in is on "
        "(DEBUG and TAU2_DEV_LOGIN)."
        if username.startswith(DEV_USERNAME_PREFIX)
        else ""
    )
    return (
        f"Nobody has signed in as {username!r} with Hugging Face yet: "
        f"ask them to sign in once, then run this again.{hint}"
    )


def dev_user_get_or_create(*, name: str):
    """The local developer account ``dev-<name>``: no password, no Hugging Face token."""
    User = get_user_model()
    username = DEV_USERNAME_PREFIX + name
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user

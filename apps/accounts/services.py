"""Writes of the accounts app: the vault's rows, staff rights, the developer sign-in,
studio API keys."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from social_django.models import UserSocialAuth

from apps.accounts import crypto
from apps.accounts.backends import SCOPES
from apps.accounts.models import HFCredential

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


def credential_rotate_keys() -> int:
    """Re-encrypt every credential under the first vault key; returns how many rows changed.

    A row that no key opens is left alone (and logged): its owner must sign in again.
    """
    changed = 0
    for pk in HFCredential.objects.values_list("pk", flat=True):
        with transaction.atomic():
            credential = HFCredential.objects.select_for_update().get(pk=pk)
            try:
                credential.access_token_enc = crypto.rotate(credential.access_token_enc)
                if credential.refresh_token_enc:
                    credential.refresh_token_enc = crypto.rotate(credential.refresh_token_enc)
            except crypto.InvalidToken:
                logger.warning("No vault key opens the credential of user %s", credential.user_id)
                continue
            credential.save(update_fields=["access_token_enc", "refresh_token_enc"])
            changed += 1
    return changed


def user_grant_staff(*, hf_username: str, superuser: bool = True, revoke: bool = False):
    """Make the person who signed in as ``hf_username`` staff (and superuser), or undo it.

    Returns the user; raises ``LookupError`` when nobody by that name has signed in yet.
    """
    social = (
        UserSocialAuth.objects.select_related("user")
        .filter(provider="huggingface", extra_data__username__iexact=hf_username)
        .first()
    )
    if social is None:
        raise LookupError(
            f"Nobody has signed in as {hf_username!r} with Hugging Face yet: "
            "ask them to sign in once, then run this again."
        )
    user = social.user
    user.is_staff = not revoke
    user.is_superuser = (not revoke) and superuser
    user.save(update_fields=["is_staff", "is_superuser"])
    return user


def dev_user_get_or_create(*, name: str):
    """The local developer account ``dev-<name>``: no password, no Hugging Face token."""
    User = get_user_model()
    username = DEV_USERNAME_PREFIX + name
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user

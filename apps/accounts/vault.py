"""The token vault: the only place that hands out a person's Hugging Face token.

    from apps.accounts.vault import SignInRequired, hf_token_for

    try:
        token = hf_token_for(user=run.started_by)
    except SignInRequired as exc:
        ...  # show str(exc) to the person: it asks them to sign in again

Tokens are decrypted here and nowhere else, returned to the caller and never logged.
``hf_token_for`` is synchronous (it may query the database and call Hugging Face):
from async code, wrap it in ``asgiref.sync.sync_to_async``.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from social_core.exceptions import (
    AuthCanceled,
    AuthCredentialError,
    AuthPolicyError,
    AuthProviderError,
    SocialAuthBaseException,
)

from apps.accounts import crypto
from apps.accounts.models import HFCredential
from apps.accounts.services import expiry_from, granted_scopes

logger = logging.getLogger(__name__)

__all__ = ["SignInRequired", "hf_token_for"]

ANONYMOUS = "Sign in with Hugging Face first: conversations run on your own Hugging Face credits."
NO_CREDENTIAL = (
    "This account has no Hugging Face token (it did not sign in with Hugging Face). "
    "Please sign in with Hugging Face for what runs on Hugging Face; a model on a "
    "connection needs no Hugging Face sign-in."
)
REVOKED = (
    "Your Hugging Face sign-in was revoked or has run out. Please sign in with Hugging Face again."
)
EXPIRED = "Your Hugging Face sign-in has expired. Please sign in with Hugging Face again."
NO_SCOPE = (
    "Your Hugging Face sign-in does not let this app call Inference Providers for you "
    "(the “inference-api” permission). Please sign in with Hugging Face again and allow it."
)
UNREADABLE = (
    "Your stored Hugging Face sign-in can no longer be read by this server. "
    "Please sign in with Hugging Face again."
)
UNREACHABLE = (
    "Your Hugging Face sign-in has expired and Hugging Face could not be reached to renew it. "
    "Please sign in with Hugging Face again."
)


class SignInRequired(Exception):
    """The person has to sign in with Hugging Face (again); ``str(exc)`` tells them why.

    The message is written for the person and never contains a token.
    """


def hf_token_for(*, user) -> str:
    """The person's current, valid Hugging Face access token (scope ``inference-api``).

    Refreshes it first when it expires within ``TAU2_TOKEN_REFRESH_MARGIN`` seconds;
    concurrent callers for the same person wait for one refresh and share its result.
    Raises ``SignInRequired`` for anonymous people, developer sign-ins, revoked or expired
    sign-ins and tokens without ``inference-api``.
    """
    if user is None or not getattr(user, "is_authenticated", False):
        raise SignInRequired(ANONYMOUS)
    credential = HFCredential.objects.filter(user_id=user.pk).first()
    if credential is None:
        raise SignInRequired(NO_CREDENTIAL)
    _check_usable(credential)
    if not credential.expires_within(settings.TAU2_TOKEN_REFRESH_MARGIN):
        return _open(credential, credential.access_token_enc)
    return _refresh(credential.pk)


def hf_credential_check(*, user_id: int) -> None:
    """Whether the person's Hugging Face sign-in still stands, without opening or
    refreshing the token (a light check, asked every few seconds of an open agent
    session). Raises ``SignInRequired`` when there is none, or it was revoked."""
    credential = HFCredential.objects.filter(user_id=user_id).first()
    if credential is None:
        raise SignInRequired(NO_CREDENTIAL)
    _check_usable(credential)


def _check_usable(credential: HFCredential) -> None:
    if credential.revoked_at is not None:
        raise SignInRequired(REVOKED)
    if not credential.has_inference_scope:
        raise SignInRequired(NO_SCOPE)


def _open(credential: HFCredential, ciphertext: str) -> str:
    try:
        return crypto.unseal(ciphertext)
    except crypto.InvalidToken:
        logger.warning(
            "No vault key opens the Hugging Face credential of user %s", credential.user_id
        )
        raise SignInRequired(UNREADABLE) from None


def _refresh(pk: int) -> str:
    """Refresh under a row lock: the first caller refreshes, the others reuse its token."""
    with transaction.atomic():
        credential = HFCredential.objects.select_for_update().get(pk=pk)
        _check_usable(credential)
        now = timezone.now()
        if not credential.expires_within(settings.TAU2_TOKEN_REFRESH_MARGIN, now=now):
            return _open(credential, credential.access_token_enc)  # refreshed while we waited
        if not credential.refresh_token_enc:
            if credential.is_expired(now=now):
                raise SignInRequired(EXPIRED)
            return _open(credential, credential.access_token_enc)
        refresh_token = _open(credential, credential.refresh_token_enc)
        try:
            response = _backend().refresh_token(refresh_token)
        except SocialAuthBaseException as error:
            if _is_refusal(error):
                logger.info(
                    "Hugging Face refused to refresh the token of user %s (%s)",
                    credential.user_id,
                    error.code,
                )
                credential.revoked_at = now
                credential.save(update_fields=["revoked_at"])
            else:
                logger.warning(
                    "Could not refresh the Hugging Face token of user %s (%s)",
                    credential.user_id,
                    error.code,
                )
                if credential.is_expired(now=now):
                    raise SignInRequired(UNREACHABLE) from None
                return _open(credential, credential.access_token_enc)
        else:
            access_token = response["access_token"]
            credential.access_token_enc = crypto.seal(access_token)
            if response.get("refresh_token"):  # rotating refresh tokens
                credential.refresh_token_enc = crypto.seal(response["refresh_token"])
            credential.expires_at = expiry_from(response, now=now)
            if response.get("scope"):
                credential.scopes = granted_scopes(response)
            credential.refreshed_at = now
            credential.refresh_count += 1
            credential.save()
            logger.info("Refreshed the Hugging Face token of user %s", credential.user_id)
            _check_usable(credential)
            return access_token
    # Only a refusal gets here: raised after the commit, so the revocation is kept.
    raise SignInRequired(REVOKED)


def _is_refusal(error: SocialAuthBaseException) -> bool:
    """True when HF said no to the refresh token (as opposed to HF being unreachable)."""
    if isinstance(error, AuthCredentialError | AuthCanceled | AuthPolicyError):
        return True
    return isinstance(error, AuthProviderError) and getattr(error, "status_code", None) in {
        400,
        401,
        403,
    }


def _backend():
    from social_django.utils import load_backend, load_strategy

    return load_backend(load_strategy(), "huggingface", redirect_uri=None)

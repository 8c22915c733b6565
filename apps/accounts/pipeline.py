"""Steps of social-auth's sign-in pipeline (see SOCIAL_AUTH_PIPELINE in settings)."""

from __future__ import annotations

import logging

from django.conf import settings
from django.shortcuts import render

from apps.accounts.backends import org_handles
from apps.accounts.services import credential_store, social_auth_strip_tokens

logger = logging.getLogger(__name__)


def require_allowed_org(strategy, backend, response, *args, **kwargs):
    """Refuse, with a page that says why, people outside ``TAU2_ALLOWED_ORGS``.

    Runs before any user or token is stored, so a refused person leaves nothing behind.
    """
    allowed = {org.lower() for org in settings.TAU2_ALLOWED_ORGS}
    if not allowed or backend.name != "huggingface":
        return None
    theirs = org_handles(response)
    if allowed & {org.lower() for org in theirs}:
        return None
    username = response.get("preferred_username") or "?"
    logger.info("Refused sign-in of %s: in none of the allowed organisations", username)
    return render(
        strategy.request,
        "accounts/refused.html",
        {"hf_username": username, "allowed_orgs": sorted(settings.TAU2_ALLOWED_ORGS)},
        status=403,
    )


def store_tokens_in_vault(backend, user, response, social=None, *args, **kwargs):
    """Put the tokens in the encrypted vault and make sure ``extra_data`` holds none."""
    if backend.name != "huggingface" or user is None:
        return None
    credential_store(user=user, token_response=response)
    if social is not None:
        social_auth_strip_tokens(social=social)
    return None

"""Reads of the accounts app."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from social_django.models import UserSocialAuth


@dataclass(frozen=True)
class AccountHeader:
    """What the page header shows of a signed-in person (no token, ever)."""

    username: str
    name: str
    picture: str
    via_hugging_face: bool


def account_header_for(*, user) -> AccountHeader | None:
    """The header's view of ``user``, or None for anonymous visitors."""
    if user is None or not user.is_authenticated:
        return None
    social = (
        UserSocialAuth.objects.filter(user_id=user.pk, provider="huggingface")
        .only("extra_data")
        .first()
    )
    extra = social.extra_data if social else {}
    picture = extra.get("picture") or ""
    if not str(picture).startswith("https://") and not settings.DEBUG:
        picture = ""  # only https images from the provider in production
    return AccountHeader(
        username=extra.get("username") or user.get_username(),
        name=extra.get("name") or "",
        picture=picture,
        via_hugging_face=social is not None,
    )


def dev_login_enabled() -> bool:
    """The developer sign-in exists only with DEBUG on and TAU2_DEV_LOGIN=true."""
    return bool(settings.DEBUG and settings.TAU2_DEV_LOGIN)


def signin_missing_settings() -> list[str]:
    """The settings Hugging Face sign-in still needs here; empty when it can start.

    A Space injects ``OAUTH_CLIENT_ID`` / ``OAUTH_CLIENT_SECRET``; elsewhere they are
    ``SOCIAL_AUTH_HUGGINGFACE_KEY`` / ``_SECRET`` (tau2site/settings.py reads either).
    """
    wanted = {
        "SOCIAL_AUTH_HUGGINGFACE_KEY": settings.SOCIAL_AUTH_HUGGINGFACE_KEY,
        "SOCIAL_AUTH_HUGGINGFACE_SECRET": settings.SOCIAL_AUTH_HUGGINGFACE_SECRET,
    }
    return [name for name, value in wanted.items() if not value]

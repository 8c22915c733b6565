"""Who may see and do what. Views of other apps call these; they hold no rules themselves.

* Tasks, policies and the API are public.
* Runs are visible to signed-in people, or to everyone when ``TAU2_PUBLIC_RUNS`` is on.
* Starting a run or a play session needs a signed-in person.
* An evaluation is paused, resumed, stopped or retried by whoever started it, or staff.
"""

from __future__ import annotations

from functools import wraps
from urllib.parse import urlencode

from django.conf import settings
from django.shortcuts import redirect
from django.urls import reverse


def can_view_runs(user) -> bool:
    """True when ``user`` may see the team's runs (read-only for anonymous visitors)."""
    return bool(settings.TAU2_PUBLIC_RUNS) or _signed_in(user)


def can_start(user) -> bool:
    """True when ``user`` may start a run or a play session (which needs a signed-in person).

    It says nothing about their token: ``apps.accounts.vault.hf_token_for`` does.
    """
    return _signed_in(user)


def can_control(user, *, owner_id: int | None) -> bool:
    """True when ``user`` may pause, resume, stop or retry what ``owner_id`` started
    (an evaluation): its starter, or staff."""
    return _signed_in(user) and (user.pk == owner_id or user.is_staff)


def signin_url(*, next_url: str, reason: str = "start") -> str:
    """The sign-in page, explaining ``reason`` ("start" or "runs"), returning to ``next_url``."""
    return f"{reverse('accounts:signin')}?{urlencode({'next': next_url, 'reason': reason})}"


def signin_required_to_start(view):
    """View decorator: anonymous visitors go to the sign-in page, which says why."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not can_start(request.user):
            return redirect(signin_url(next_url=request.get_full_path(), reason="start"))
        return view(request, *args, **kwargs)

    return wrapper


def _signed_in(user) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active)

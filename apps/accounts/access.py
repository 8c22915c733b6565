"""Who may see and do what. Views of other apps call these; they hold no rules themselves.

* Tasks, policies and the API are public.
* Runs are visible to signed-in people, or to everyone when ``TAU2_PUBLIC_RUNS`` is on.
* Starting a run or a play session needs a signed-in person.
* A run is stopped, and an evaluation paused, resumed, stopped or retried, by whoever
  started it, or staff.
* Staff label runs and their messages (review), and so does every signed-in member when
  ``TAU2_REVIEW_BY_MEMBERS`` is on; a label is deleted by its author, or staff.
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
    (a run, a play session, an evaluation): its starter, or staff."""
    return _signed_in(user) and (user.pk == owner_id or user.is_staff)


def can_review(user) -> bool:
    """True when ``user`` may label runs and their messages, and see the review queue."""
    return _signed_in(user) and (user.is_staff or bool(settings.TAU2_REVIEW_BY_MEMBERS))


def can_delete_label(user, *, author_id: int | None) -> bool:
    """True when ``user`` may delete a review label written by ``author_id``: its author
    (even once the setting no longer lets members review), or staff."""
    return can_control(user, owner_id=author_id)


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

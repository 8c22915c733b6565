"""Training session pages: the list, a session's page, and its live part (asked again
every few seconds by htmx while the page is open, so the curve grows as episodes land)."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_safe

from apps.accounts.access import can_view_runs, signin_url
from apps.training import selectors
from apps.training.models import TrainingSession

LIVE_EVERY_SECONDS = 3


def _live_context(session: TrainingSession) -> dict:
    summary = selectors.training_summary(session)
    return {
        "session": session,
        "summary": summary,
        "chart_json": json.dumps(summary.chart()),
        "guard": settings.TAU2_TRAINING_SPLIT_GUARD,
        "live_every": LIVE_EVERY_SECONDS,
    }


@require_safe
def training_list(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    page = Paginator(selectors.training_session_list(), 30).get_page(request.GET.get("page"))
    return render(request, "training/list.html", {"page": page})


@require_safe
def training_detail(request, pk: int):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    session = selectors.training_session_get(pk=pk)
    return render(request, "training/detail.html", _live_context(session))


@require_safe
def training_live(request, pk: int):
    """The session's curve, numbers and episodes as they stand (htmx swaps them in)."""
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's training sessions.")
    session = selectors.training_session_get(pk=pk)
    return render(request, "training/_live.html", _live_context(session))

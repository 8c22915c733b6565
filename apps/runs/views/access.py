"""The runs pages' access helper, shared by the history, review and fork views."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from apps.accounts.access import can_view_runs
from apps.runs import selectors
from apps.runs.models import Run


def run_for_user(request, pk: int) -> Run:
    """The run, if the visitor may see runs (403 otherwise; 404 if it doesn't exist)."""
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's runs.")
    return selectors.run_get(pk=pk)

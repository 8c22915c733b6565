from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.inference import selectors
from apps.inference.services import catalogue_refresh


def _require_staff(request) -> None:
    """Only staff refresh the catalogue: everyone else, signed in or not, gets 403."""
    if not (request.user.is_authenticated and request.user.is_staff):
        raise PermissionDenied("Only staff can refresh the model catalogue.")


def model_list(request):
    """The catalogue, public and read-only: every model with its usable providers."""
    q = " ".join((request.GET.get("q") or "").split())[:200]
    choices = selectors.model_choices(q=q)
    return render(
        request,
        "inference/models.html",
        {
            "choices": choices,
            "q": q,
            "refreshed_at": selectors.catalogue_refreshed_at(),
            "is_fallback": any(c.is_fallback for c in choices),
        },
    )


@require_POST
def model_refresh(request):
    """Refresh now, in the request: staff see what the router answered right away."""
    _require_staff(request)
    report = catalogue_refresh()
    level = messages.SUCCESS if report.source == "router" else messages.WARNING
    messages.add_message(request, level, report.summary())
    return redirect("inference:list")

"""The run history: the team's runs of one kind (single runs unless asked), filtered and
paged; evaluation runs one row per evaluation until one is opened."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.http import urlencode

from apps.accounts.access import can_review, can_view_runs, signin_url
from apps.runs import selectors
from apps.runs.models import ReviewLabel, Run
from apps.runs.selectors import RunFilters
from apps.runs.views.history import ids_of


def run_list(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    filters = RunFilters.from_params(request.GET).for_history()
    if filters.grouped:
        rows = selectors.run_evaluation_groups(filters=filters)
    else:
        rows = selectors.run_list(filters=filters)
    page = Paginator(rows, 30).get_page(request.GET.get("page"))
    # Runs ticked before a refused compare come back ticked (see run_compare).
    picked = set(ids_of(request.GET.get("picked", "")))
    return render(
        request,
        "runs/list.html",
        {
            "page": page,
            "groups": selectors.evaluation_runs_of(page.object_list) if filters.grouped else (),
            "filters": filters,
            "query": urlencode(filters.as_query()),
            "filtered": bool(filters.as_query().keys() - {"kind"}),
            "statuses": Run.Status.choices,
            "kinds": selectors.history_kinds(),
            "picked": picked,
            "categories": ReviewLabel.Category.choices,
            "can_review": can_review(request.user),
        },
    )

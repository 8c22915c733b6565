"""Run history: the list, one run, its JSON, comparison and stopping."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from apps.accounts.access import (
    can_start,
    can_view_runs,
    signin_url,
)
from apps.runs import exports, presenters, selectors, services
from apps.runs.models import Run
from apps.runs.selectors import RunFilters


def _get_run_for_user(request, pk: int) -> Run:
    """The run, if the visitor may see runs (403 otherwise; 404 if it doesn't exist)."""
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's runs.")
    return selectors.run_get(pk=pk)


def run_list(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    filters = RunFilters.from_params(request.GET)
    page = Paginator(selectors.run_list(filters=filters), 30).get_page(request.GET.get("page"))
    return render(
        request,
        "runs/list.html",
        {
            "page": page,
            "filters": filters,
            "query": urlencode(filters.as_query()),
            "statuses": Run.Status.choices,
        },
    )


def run_detail(request, pk: int):
    run = _get_run_for_user(request, pk)
    events = [presenters.event_view(e) for e in run.events.order_by("seq")]
    return render(
        request,
        "runs/detail.html",
        {
            "run": run,
            "events": events,
            "result": presenters.reward_view(run.reward_info),
            "last_seq": events[-1]["seq"] if events else -1,
            "can_stop": can_start(request.user) and not run.is_final,
        },
    )


@require_POST
def run_stop(request, pk: int):
    run = _get_run_for_user(request, pk)
    if not can_start(request.user):
        raise PermissionDenied("Sign in to stop runs.")
    services.run_stop(run=run, by=request.user)
    if request.htmx:
        return HttpResponse(presenters.status_html(run, user=request.user, request=request))
    messages.info(request, "Stop requested.")
    return redirect(run)


def run_json(request, pk: int):
    run = _get_run_for_user(request, pk)
    fmt = request.GET.get("format", "studio")
    if fmt not in {"studio", "tau2"}:
        raise Http404("Unknown format")
    payload = exports.run_export(run) if fmt == "studio" else exports.run_export_tau2(run)
    response = JsonResponse(payload, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-{fmt}.json"'
    return response


def run_compare(request):
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's runs.")
    try:
        ids = [int(x) for x in request.GET.get("ids", "").replace(" ", "").split(",") if x]
    except ValueError:
        ids = []
    ids = list(dict.fromkeys(ids))
    if not 2 <= len(ids) <= 4:
        return render(
            request, "runs/compare.html", {"error": "Pick 2 to 4 runs to compare."}, status=400
        )
    runs = {r.pk: r for r in selectors.run_list(filters=RunFilters()).filter(pk__in=ids)}
    missing = [i for i in ids if i not in runs]
    if missing:
        raise Http404(f"No run {missing[0]}")
    columns = exports.compare_columns([runs[i] for i in ids])
    return render(
        request,
        "runs/compare.html",
        {"columns": columns, "ids": ",".join(map(str, ids)), "rows": exports.compare_rows(columns)},
    )

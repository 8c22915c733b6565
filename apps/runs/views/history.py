"""Run history: one run, its JSON, comparison and stopping (the list is in .listing)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from apps.accounts.access import (
    can_control,
    can_view_runs,
)
from apps.runs import compare, diagnosis, exports, forks, presenters, selectors, services
from apps.runs.selectors import RunFilters
from apps.runs.views.access import run_for_user
from apps.runs.views.review import review_context
from apps.runs.views.start import rerun_offer


def run_detail(request, pk: int):
    """A run's page; ``?part=body`` its body alone (``includes/run_body.html``), which a
    live page fetches when the run ends, so it then shows what a reload shows."""
    run = run_for_user(request, pk)
    part = request.GET.get("part") == "body"
    template = "includes/run_body.html" if part else "runs/detail.html"
    return render(request, template, run_page_context(request, run))


def run_page_context(request, run) -> dict:
    """Everything a run's page shows, for ``request``'s person: the one builder of the page
    and of its body fetched live. Each message is ``presenters.message_view`` with its menu
    (as the live socket sends it), its review slot and its trace badge."""
    fork = forks.fork_context(request.user, run)
    menu = presenters.message_menu(run=run, user=request.user, fork=fork)
    events = [presenters.message_view(e, menu=menu) for e in run.events.order_by("seq")]
    return {
        **review_context(request, run, events),
        "run": run,
        "events": events,
        "result": presenters.reward_view(run.reward_info),
        "diagnosis": diagnosis.diagnosis_view(run, events=events),  # badges on events too
        "last_seq": events[-1]["seq"] if events else -1,
        "can_stop": can_control(request.user, owner_id=run.created_by_id),
        "rerun": rerun_offer(request.user, run),
        "fork": fork,
    }


@require_POST
def run_stop(request, pk: int):
    run = run_for_user(request, pk)
    if not can_control(request.user, owner_id=run.created_by_id):
        raise PermissionDenied("Only the person who started this run, or staff, can stop it.")
    services.run_stop(run=run, by=request.user)
    if request.htmx:
        return HttpResponse(presenters.status_html(run, user=request.user, request=request))
    messages.info(request, "Stop requested.")
    return redirect(run)


def run_json(request, pk: int):
    run = run_for_user(request, pk)
    fmt = request.GET.get("format", "studio")
    if fmt not in {"studio", "tau2"}:
        raise Http404("Unknown format")
    payload = exports.run_export(run) if fmt == "studio" else exports.run_export_tau2(run)
    response = JsonResponse(payload, json_dumps_params={"indent": 2, "ensure_ascii": False})
    response["Content-Disposition"] = f'attachment; filename="run-{run.pk}-{fmt}.json"'
    return response


def ids_of(text: str) -> list[int]:
    """The run ids in a comma-separated list, in order, once each; junk is left out."""
    parts = (part.strip() for part in text.split(","))
    ids = dict.fromkeys(int(p) for p in parts if p.isascii() and p.isdigit() and len(p) < 19)
    return list(ids)[:100]


def run_compare(request):
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's runs.")
    # ids=1,2 from the list's script; pick=1&pick=2 from its form without script.
    ids = ids_of(",".join([request.GET.get("ids", ""), *request.GET.getlist("pick")]))
    if not 2 <= len(ids) <= 4:
        # Back to the list with the same runs ticked, saying why (a 400 page lost them).
        picked = f"{len(ids)} run{'' if len(ids) == 1 else 's'}" if ids else "no run"
        messages.warning(request, f"Pick 2 to 4 runs to compare; you picked {picked}.")
        query = urlencode({"picked": ",".join(map(str, ids))}) if ids else ""
        return redirect(f"{reverse('runs:list')}{'?' + query if query else ''}")
    runs = {r.pk: r for r in selectors.run_list(filters=RunFilters()).filter(pk__in=ids)}
    missing = [i for i in ids if i not in runs]
    if missing:
        raise Http404(f"No run {missing[0]}")
    picked = [runs[i] for i in ids]
    context = compare.compare_context(picked, start=forks.fork_compare_from(picked))
    return render(request, "runs/compare.html", {**context, "ids": ",".join(map(str, ids))})

"""Race pages: the list, the form that starts one, the race page and its live lanes."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_safe

from apps.accounts.access import can_view_runs, signin_required_to_start, signin_url
from apps.connections.picker import connection_groups, picks_a_connection
from apps.inference.selectors import model_choices
from apps.races import selectors, services
from apps.races.forms import RaceForm
from apps.races.models import MAX_LANES, MIN_LANES, Race
from apps.runs.forms import has_retrieval, query_text, run_form_initial, spec_from
from apps.runs.selectors import task_picker
from apps.runs.spec import Side


def _lane_pickers(picked: list[str]) -> list[dict]:
    """One agent-model picker per possible lane, with what was picked there; the first
    two must be filled, the others may stay empty."""
    picked = [query_text(m) for m in picked]
    return [
        {
            "id": f"agent_model_{i + 1}",
            "label": f"Lane {i + 1}",
            "selected": picked[i] if i < len(picked) else "",
            "optional": i >= MIN_LANES,
            "empty_label": "No model in this lane" if i >= MIN_LANES else "",
        }
        for i in range(MAX_LANES)
    ]


def _race_for(request, pk: int) -> Race:
    if not can_view_runs(request.user):
        raise PermissionDenied("Sign in to see the team's runs.")
    return get_object_or_404(Race.objects.select_related("task", "created_by"), pk=pk)


@require_safe
def race_list(request):
    if not can_view_runs(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    page = Paginator(selectors.race_list(), 30).get_page(request.GET.get("page"))
    return render(request, "races/list.html", {"page": page})


@signin_required_to_start
def race_new(request):
    """``GET``: the form (``?domain=&task=&model=`` preselect, as on the run form);
    ``POST``: start the race and open its page."""
    form = RaceForm(
        request.POST or None,
        initial=run_form_initial(request.GET, user=request.user),
        user=request.user,
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        models = data["agent_model"]
        try:
            race = services.race_create(
                user=request.user,
                task=data["task"],
                spec=spec_from(data, lanes=True),
                lanes=[Side(m.model, m.connection) for m in models],
                agent_prices=[m.prices for m in models],
            )
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            return redirect(race)
    picked = form["agent_model"].value() if form.is_bound else [request.GET.get("model", "")]
    picker = task_picker(
        domain=query_text(form["domain"].value()),
        split=query_text(form["split"].value()),
        q=query_text(form["task_id"].value()),
        form_url=reverse("races:new"),
    )
    return render(
        request,
        "races/new.html",
        {
            "form": form,
            "limits_advice": picks_a_connection(form),
            "picker": picker,
            "lanes": _lane_pickers(picked or []),
            "choices": model_choices(),
            "connections": connection_groups(request.user),
            "args_fields": form.llm_args_fields,
            "has_retrieval": has_retrieval(),  # a knowledge domain (banking_knowledge, τ² 1.x)
        },
        status=400 if form.errors else 200,  # a refused start is a client error
    )


@require_safe
def race_detail(request, pk: int):
    race = _race_for(request, pk)
    return render(request, "races/detail.html", selectors.race_live(race))


@require_safe
def race_lanes(request, pk: int):
    """The scoreboard and the aligned lanes as they stand (the race page's script asks
    for them again whenever a lane's socket says something changed)."""
    race = _race_for(request, pk)
    return render(request, "races/_live.html", selectors.race_live(race))

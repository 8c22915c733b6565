"""Schedules' pages: make one from an evaluation's page, the list of one's schedules, and
edit / pause / resume / delete, for the schedule's owner or staff."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.access import can_control, signin_required_to_start
from apps.evaluations.selectors import evaluation_get
from apps.schedules import selectors, services
from apps.schedules.crons import cron_describe
from apps.schedules.forms import ScheduleForm


def _get_schedule_for_change(request, pk: int):
    schedule = selectors.schedule_get(pk=pk)
    if not can_control(request.user, owner_id=schedule.owner_id):
        raise PermissionDenied("Only whoever made this schedule, or staff, may change it.")
    return schedule


@signin_required_to_start
@require_GET
def schedule_list(request):
    schedules = selectors.schedule_list_for(user=request.user)
    return render(
        request,
        "schedules/list.html",
        {
            "schedules": [(s, cron_describe(s.cron)) for s in schedules],
            "time_zone": settings.TIME_ZONE,
            "nav_section": "evaluations",
        },
    )


@require_POST
@signin_required_to_start
def schedule_create(request, pk: int):
    """Repeat the evaluation on a schedule, as the visitor; back to its page on a refusal."""
    evaluation = evaluation_get(pk=pk)
    back = f"{evaluation.get_absolute_url()}#schedules"
    form = ScheduleForm(request.POST)
    if not form.is_valid():
        messages.error(request, " ".join(m for ms in form.errors.values() for m in ms))
        return redirect(back)
    try:
        schedule = services.schedule_create(
            evaluation=evaluation, by=request.user, **form.cleaned_data
        )
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect(back)
    messages.info(request, f"Repeating it {cron_describe(schedule.cron)}.")
    return redirect("schedules:list")


@signin_required_to_start
def schedule_detail(request, pk: int):
    """``GET``: the edit form; ``POST``: another cron or name."""
    schedule = _get_schedule_for_change(request, pk)
    initial = {"preset": schedule.preset, "cron": schedule.cron, "name": schedule.name}
    form = ScheduleForm(request.POST if request.method == "POST" else None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            services.schedule_edit(schedule=schedule, by=request.user, **form.cleaned_data)
        except ValidationError as exc:
            form.add_error("cron", exc)
        else:
            messages.info(request, f"It now repeats {cron_describe(schedule.cron)}.")
            return redirect("schedules:list")
    return render(
        request,
        "schedules/detail.html",
        {"schedule": schedule, "form": form, "nav_section": "evaluations"},
        status=400 if form.errors else 200,
    )


def _set_enabled(request, pk: int, enabled: bool):
    schedule = _get_schedule_for_change(request, pk)
    services.schedule_set_enabled(schedule=schedule, by=request.user, enabled=enabled)
    messages.info(request, "Resumed." if enabled else "Paused: its ticks start nothing.")
    return redirect("schedules:list")


@require_POST
@signin_required_to_start
def schedule_pause(request, pk: int):
    return _set_enabled(request, pk, False)


@require_POST
@signin_required_to_start
def schedule_resume(request, pk: int):
    return _set_enabled(request, pk, True)


@require_POST
@signin_required_to_start
def schedule_delete(request, pk: int):
    schedule = _get_schedule_for_change(request, pk)
    services.schedule_delete(schedule=schedule, by=request.user)
    messages.info(request, "Deleted; the evaluations it started stay.")
    return redirect(reverse("schedules:list"))

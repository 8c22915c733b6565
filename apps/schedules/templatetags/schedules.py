"""The "Schedules" panel of an evaluation's page: its schedules the visitor sees, and the
"Repeat on a schedule…" form for whoever may start evaluations. A tag, so that the
evaluations app's view knows nothing of schedules."""

from __future__ import annotations

from django import template

from apps.accounts.access import can_start
from apps.evaluations.models import Evaluation
from apps.schedules import selectors
from apps.schedules.crons import cron_describe
from apps.schedules.forms import ScheduleForm

register = template.Library()


@register.inclusion_tag("schedules/_on_evaluation.html", takes_context=True)
def evaluation_schedules(context, evaluation: Evaluation) -> dict:
    user = context["request"].user
    may_start = can_start(user)
    rows = selectors.schedule_list_for(user=user, evaluation=evaluation) if may_start else []
    return {
        "evaluation": evaluation,
        "schedules": [(s, cron_describe(s.cron)) for s in rows],
        "form": ScheduleForm(initial={"name": evaluation.name}) if may_start else None,
        "repeatable": evaluation.status != Evaluation.Status.IMPORTED,
        "csrf_token": context.get("csrf_token"),
    }

"""``{% evaluation_autoreview_form %}``: the form that starts an auto-review of an
evaluation's runs, for staff (``None`` for anyone else), on the visitor's models."""

from __future__ import annotations

from django import template

from apps.runs import autoreview
from apps.runs.views.review_forms import autoreview_form

register = template.Library()


@register.simple_tag(takes_context=True)
def evaluation_autoreview_form(context):
    request = context.get("request")
    user = getattr(request, "user", None)
    if not autoreview.can_request(user):
        return None
    return autoreview_form(user, evaluation=True)

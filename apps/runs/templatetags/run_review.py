"""The team's review of runs where other apps' pages show it: ``{% task_review_flags task %}``
on the task page (the tasks app knows nothing of runs; its template asks for this)."""

from django import template

from apps.accounts.access import can_view_runs
from apps.runs import review

register = template.Library()


@register.inclusion_tag("includes/review_flags.html", takes_context=True)
def task_review_flags(context, task) -> dict:
    """The reviewers' labels on runs of ``task`` — only for people who may see runs
    (reviewers' notes are about the team's runs)."""
    request = context.get("request")
    user = getattr(request, "user", None)
    flags = review.review_flags(task=task) if user is not None and can_view_runs(user) else []
    return {"review_flags": flags}

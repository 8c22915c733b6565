"""Where a run's (or an evaluation's) sides ran, and which reasoned, for templates:
``{{ run|sides }}`` and ``{{ run|reasoning_roles }}``."""

from django import template

from apps.runs import presenters

register = template.Library()


@register.filter
def sides(row) -> list:
    """The agent's and the customer's :class:`apps.runs.presenters.SideView` of a run or
    an evaluation: model, connection (never its key) and τ² llm_args."""
    return presenters.side_views(row)


@register.filter
def reasoning_roles(run) -> list[str]:
    """The roles of ``run`` whose model reasoned (:func:`apps.runs.presenters.reasoning_roles`)."""
    return presenters.reasoning_roles(run)

"""A connection's spend this month where the connections pages show it:
``{% load connection_budgets %}{% connection_spend connection %}``.

It lives in the runs app because spend is read from runs (``apps.runs.budgets``) and the
connections app sits below this one; templates are not imports, so its pages load it.
"""

from django import template

from apps.runs import budgets

register = template.Library()


@register.inclusion_tag("connections/_spend.html", takes_context=True)
def connection_spend(context, connection) -> dict:
    """This month's spend of ``connection``, its budget and what is left; the viewer's
    own spend and personal budget; each person's spend for staff."""
    request = context.get("request")
    viewer = getattr(request, "user", None)
    return {"spend": budgets.connection_spend_view(connection=connection, viewer=viewer)}

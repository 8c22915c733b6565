"""Money as people read it: ``{{ value|money }}`` and ``{{ run|run_cost }}``."""

from django import template

from apps.inference.pricing import money_label
from apps.runs import presenters

register = template.Library()


@register.filter
def money(value) -> str:
    """``$0.000032``, ``$0.27``, ``$1,234.50`` — significant digits, never a rounded $0 —
    or ``unpriced`` for a cost that has no price."""
    return money_label(value)


@register.filter
def run_cost(run) -> dict:
    """The run's cost split by role (:func:`apps.runs.presenters.cost_view`)."""
    return presenters.cost_view(run)

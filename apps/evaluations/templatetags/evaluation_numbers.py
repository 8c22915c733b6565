"""What an evaluation's numbers are over, for templates: ``{{ summary|left_out }}`` and
``{{ summary|clean_scores }}``."""

from django import template

from apps.evaluations import presenters

register = template.Library()


@register.filter
def left_out(summary) -> list[tuple[str, int]]:
    """The runs left out of τ²'s metrics, as (why, how many) (``presenters.left_out``)."""
    return presenters.left_out(summary)


@register.filter
def clean_scores(summary) -> list[dict]:
    """pass^k over every scored run and without critical user-simulator errors, by k."""
    return presenters.clean_scores(summary)

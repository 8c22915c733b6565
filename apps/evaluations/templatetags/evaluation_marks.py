"""Marks on an evaluation for templates: ``{{ evaluation|comparability }}`` and
``{% leaderboard_settings as lb %}``."""

from django import template
from django.conf import settings

from apps.evaluations import presenters
from tau2_env.engine.results import LEADERBOARD
from tau2_env.llm.llm_args import llm_args_label

register = template.Library()


@register.filter
def comparability(evaluation) -> presenters.Comparability:
    """Whether ``evaluation`` is comparable to taubench.com's leaderboard, and every
    reason why not (:func:`apps.evaluations.presenters.comparability`)."""
    return presenters.comparability(evaluation)


@register.simple_tag
def leaderboard_settings() -> dict:
    """What taubench.com's leaderboard runs with, for pages to say it."""
    return {
        "customers": presenters.either(settings.TAU2_LEADERBOARD_CUSTOMERS),
        "user_args": llm_args_label(LEADERBOARD.user_llm_args),
        "split": LEADERBOARD.split,
        "max_steps": LEADERBOARD.max_steps,
        "max_errors": LEADERBOARD.max_errors,
        "trials": LEADERBOARD.trials,
    }

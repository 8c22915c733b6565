"""The evaluation page's judge and review parts: ``{% evaluation_autoreview_form %}``, the
form that starts an auto-review of its runs, for staff (``None`` for anyone else), on the
visitor's models; ``{% evaluation_judge_costs evaluation %}``, what τ²'s NL judge and
the reviewers cost over its runs."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django import template
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Count, Q, Sum

from apps.inference.pricing import money_label
from apps.runs import autoreview
from apps.runs.models import AutoReview, Run
from apps.runs.views.review_forms import autoreview_form

register = template.Library()


@register.simple_tag(takes_context=True)
def evaluation_autoreview_form(context):
    request = context.get("request")
    user = getattr(request, "user", None)
    if not autoreview.can_request(user):
        return None
    return autoreview_form(user, evaluation=True)


@register.simple_tag
def evaluation_standing_review(evaluation):
    """The evaluation's standing review (each run reviewed as it ends), or ``None`` (read
    with the evaluation where its page fetched it so)."""
    try:
        return evaluation.standing_review
    except ObjectDoesNotExist:
        return None


@dataclass(frozen=True)
class RoleCost:
    """One role's calls over an evaluation's runs: tokens, the priced part, and how many
    of the runs (or reviews) that made calls had no price (then the label says so)."""

    calls: int  # runs judged, or reviews that called the reviewer
    prompt_tokens: int
    completion_tokens: int
    cost: Decimal | None
    unpriced: int

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def label(self) -> str:
        if not self.calls:
            return "no calls"
        if self.cost is None:
            return "unpriced"
        return money_label(self.cost) + (" + unpriced" if self.unpriced else "")


def _role_cost(rows, prefix: str) -> RoleCost:
    called = Q(**{f"{prefix}prompt_tokens__gt": 0}) | Q(**{f"{prefix}completion_tokens__gt": 0})
    total = rows.filter(called).aggregate(
        calls=Count("pk"),
        prompt=Sum(f"{prefix}prompt_tokens"),
        completion=Sum(f"{prefix}completion_tokens"),
        cost=Sum(f"{prefix}cost_usd"),
        unpriced=Count("pk", filter=Q(**{f"{prefix}cost_usd__isnull": True})),
    )
    return RoleCost(
        calls=total["calls"],
        prompt_tokens=total["prompt"] or 0,
        completion_tokens=total["completion"] or 0,
        cost=total["cost"],
        unpriced=total["unpriced"],
    )


@register.simple_tag
def evaluation_judge_costs(evaluation) -> dict:
    """``{"judge": RoleCost, "reviewer": RoleCost}`` over ``evaluation``'s runs: τ²'s NL
    judge (role judge, on each run) and the auto-reviews of its runs."""
    return {
        "judge": _role_cost(Run.objects.filter(evaluation_id=evaluation.pk), "judge_"),
        "reviewer": _role_cost(AutoReview.objects.filter(run__evaluation_id=evaluation.pk), ""),
    }

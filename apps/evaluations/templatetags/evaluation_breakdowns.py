"""The paper's breakdowns for the evaluation page: ``{% evaluation_breakdowns evaluation
as breakdowns %}`` and ``{% mode_comparison evaluation as rows %}``
(:mod:`apps.evaluations.breakdowns`)."""

from django import template

from apps.evaluations import breakdowns as computed
from apps.runs.models import Run
from tau2_env.engine.episodes import IMPLEMENTATIONS

register = template.Library()


@register.simple_tag
def evaluation_breakdowns(evaluation, state=None, data="") -> list[computed.Breakdown]:
    """The breakdowns, computed once per change of the page's live state (``state`` and
    ``data``: what the page shows of its runs), else (none given: the live state is
    being computed) afresh."""
    if not state:
        return computed.evaluation_breakdowns(evaluation)
    return computed.evaluation_breakdowns_kept(evaluation, stamp=f"{sorted(state.items())}{data}")


@register.simple_tag
def mode_comparison(evaluation) -> list[computed.ModeRow] | None:
    return computed.mode_comparison_kept(evaluation)


@register.filter
def mode_label(mode: str) -> str:
    """A mode as people read it, with the agent and user ``tau2 run`` names in it."""
    agent, user = IMPLEMENTATIONS.get(mode, ("?", "?"))
    label = Run.Mode(mode).label if mode in Run.Mode.values else mode
    return f"{label} ({agent} + {user})"

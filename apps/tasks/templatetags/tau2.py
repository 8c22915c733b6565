import functools
import json

import markdown as md
import nh3
from django import template
from django.utils.safestring import mark_safe

from apps.tasks.task_sets import task_set_label

register = template.Library()

# What markdown may become on a page: bleach's defaults (which this list kept when it
# moved to nh3, bleach's successor) and the blocks policies and messages use.
_TAGS = {
    "a",
    "abbr",
    "acronym",
    "b",
    "i",
    "p",
    "pre",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "hr",
    "br",
    "ul",
    "ol",
    "li",
    "code",
    "blockquote",
    "em",
    "strong",
}


@functools.lru_cache(maxsize=64)
def _render(text: str) -> str:
    html = md.markdown(text, extensions=["tables", "fenced_code", "sane_lists"])
    return nh3.clean(
        html,
        tags=_TAGS,
        attributes={"a": {"href", "title"}},
        url_schemes={"http", "https", "mailto"},  # bleach's: no javascript:, data: or file:
    )


@register.filter
def markdown(text: str | None) -> str:
    """Markdown rendered to sanitised HTML (policies, customer and agent messages)."""
    return mark_safe(_render(text or ""))  # noqa: S308 - sanitised by nh3 above


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def compact_json(value) -> str:
    return json.dumps(value, ensure_ascii=False)


@register.filter
def task_set(tau2_version: str) -> str:
    """``{{ evaluation.provenance.tau2_version|task_set }}``: ``τ² 0.2 — legacy task set``
    (:func:`apps.tasks.task_sets.task_set_label`)."""
    return task_set_label(tau2_version or "")

"""Long ids that wrap where a reader would break them: ``{{ task.task_id|breakable }}``.

τ²'s telecom ids run to 180 characters without a space
(``[mms_issue]airplane_mode_on|bad_network_preference|…[PERSONA:Easy]``), model names to
60 (``deepseek-ai/DeepSeek-V4.1-Flash:novita``). A table cell that may break them anywhere
breaks its ordinary words too ("complet ed", "$0.0 36"); one that may not widens the page.
This filter lets such an id wrap only after its separators, so cells keep
``overflow-wrap: break-word`` and no word is cut between two letters.
"""

from __future__ import annotations

import re

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# After these a line may break; before "[" too (telecom's "…_on[PERSONA:Easy]").
_AFTER = re.compile(r"([_\-|/:.,\]=]+)")
_BEFORE = re.compile(r"(?<=[^\s])(\[)")


@register.filter(is_safe=True)
def breakable(value) -> SafeString:
    """``value`` escaped, with ``<wbr>`` after each run of separators (``_ - | / : . ,
    ] =``) and before ``[``; text without them is unchanged."""
    text = escape("" if value is None else str(value))
    # The separators are none of the characters of escape()'s entities (&, #, ;, letters).
    text = _AFTER.sub(r"\1<wbr>", text)
    # Safe: the text was escaped above; only <wbr> was added.
    return mark_safe(_BEFORE.sub(r"<wbr>\1", text))  # noqa: S308


# Where a task id's names part: after "|" and "]", before "[" (telecom's
# "[mms_issue]airplane_mode_on|data_saver_mode_on[PERSONA:Easy]").
_PARTS = re.compile(r"(?<=[|\]])|(?<=\S)(?=\[)")


@register.filter(is_safe=True)
def name_parts(value) -> SafeString:
    """``value`` escaped, as one ``<span class="id-part">`` per name it is made of (split
    after ``|`` and ``]``, before ``[``) with ``<wbr>`` between them: a line breaks
    between two names, never inside one (``data_saver_mode_`` / ``on``) — for a
    breadcrumb, where a name is read whole; a name longer than the line still wraps
    (the crumbs' ``overflow-wrap: break-word``)."""
    parts = [p for p in _PARTS.split("" if value is None else str(value)) if p]
    return mark_safe(  # noqa: S308 — each part escaped by format_html
        "<wbr>".join(format_html('<span class="id-part">{}</span>', p) for p in parts)
    )

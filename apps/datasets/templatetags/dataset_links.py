"""``{% dataset_href %}``: a link to the datasets page or a download of a selection."""

from __future__ import annotations

from django import template
from django.http import QueryDict
from django.urls import reverse

register = template.Library()


@register.simple_tag
def dataset_href(
    view: str = "download",
    *,
    query: str = "",
    evaluation=None,
    session=None,
    **params: str,
) -> str:
    """``/datasets/download/?…`` (``view="download"``) or ``/datasets/?…`` (``"page"``) for
    the selection ``query`` (a query string, e.g. the history's filters) narrowed to
    ``evaluation`` and ``session`` (ids) when given, with ``params`` (``type``, ``format``,
    ``pairs``) added. The result is escaped by the template like any other value."""
    selection = QueryDict(query or "", mutable=True)
    for name, value in (("evaluation", evaluation), ("session", session), *params.items()):
        if value not in (None, ""):
            selection[name] = str(value)
    url = reverse("datasets:download" if view == "download" else "datasets:page")
    encoded = selection.urlencode()
    return f"{url}?{encoded}" if encoded else url

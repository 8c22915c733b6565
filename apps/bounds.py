"""Numbers bounded by the column that stores them.

A form field for a model's integer, or an import's check of one, takes its limits from
the model field (``connection.ops.integer_field_range``, what Django's own model
validators use), so a number the database cannot hold is refused with a message and
never reaches it as a ``DataError``.
"""

from __future__ import annotations

from django import forms
from django.db import connection, models


def column_range(model: type[models.Model], name: str) -> tuple[int, int]:
    """The smallest and largest integer the column of ``model.name`` holds."""
    field = model._meta.get_field(name)
    low, high = connection.ops.integer_field_range(field.get_internal_type())
    return low, high


def integer_field(
    model: type[models.Model],
    name: str,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    **kwargs,
) -> forms.IntegerField:
    """A form ``IntegerField`` for what is stored in ``model.name``: ``min_value`` and
    ``max_value`` (if given) narrowed to the column's range, which applies either way."""
    low, high = column_range(model, name)
    return forms.IntegerField(
        min_value=low if min_value is None else max(low, min_value),
        max_value=high if max_value is None else min(high, max_value),
        **kwargs,
    )

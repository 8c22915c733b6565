"""The JSON API's pages (``REST_FRAMEWORK["DEFAULT_PAGINATION_CLASS"]``).

A module of its own: DRF's generic views read the setting when they are imported, so the
class cannot live beside them in ``apps.tasks.api``.
"""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    """``limit`` defaults to ``PAGE_SIZE`` and is cut to ``max_limit``: no request asks the
    database for an unbounded (or out-of-range) number of rows."""

    max_limit = 1000

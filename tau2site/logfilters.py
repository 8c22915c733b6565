"""Logging filters the settings' ``LOGGING`` installs."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied


class ExpectedForbidden(logging.Filter):
    """A 403 from ``PermissionDenied`` (a visitor refused, as the access rules say) is
    logged by Django's ``django.request`` with its traceback: it keeps its one line, the
    traceback goes — an expected refusal is no error. Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, PermissionDenied) and getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True

"""What the server's log says (``LOGGING`` in the settings): each record once, and a
refused visitor in one line."""

from __future__ import annotations

import io
import logging
import sys

import pytest
from django.core.exceptions import PermissionDenied

from tau2site.logfilters import ExpectedForbidden

pytestmark = pytest.mark.django_db


@pytest.fixture
def console():
    """What the console handlers of the root and ``django`` loggers write, in one
    stream (pytest's own handlers left out): a record reaching two is written twice."""
    handlers = {
        h
        for name in ("", "django")
        for h in logging.getLogger(name).handlers
        if type(h) is logging.StreamHandler
    }
    stream = io.StringIO()
    streams = [(h, h.setStream(stream)) for h in handlers]
    yield stream.getvalue
    for handler, old in streams:
        handler.setStream(old)


@pytest.mark.parametrize("debug", [False, True])
def test_charlie_refused_is_one_line_without_a_traceback(client, settings, console, debug):
    """Issue 33: a normal 403 was logged with its traceback, and twice under DEBUG
    (Django's own console handler and ours)."""
    settings.TAU2_PUBLIC_RUNS = False
    settings.DEBUG = debug
    response = client.get("/evaluations/1/state/")
    assert response.status_code == 403
    lines = [line for line in console().splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert (
        "WARNING django.request: Forbidden (Permission denied): /evaluations/1/state/" in (lines[0])
    )
    assert "Traceback" not in console()


def _record(exc: BaseException, status_code: int) -> logging.LogRecord:
    try:
        raise exc
    except type(exc):
        record = logging.LogRecord(
            "django.request", logging.WARNING, __file__, 1, "x", (), sys.exc_info()
        )
    record.status_code = status_code
    return record


def test_only_an_expected_403_loses_its_traceback():
    forbidden = _record(PermissionDenied("no"), 403)
    assert ExpectedForbidden().filter(forbidden) and forbidden.exc_info is None
    error = _record(RuntimeError("bug"), 500)
    assert ExpectedForbidden().filter(error) and error.exc_info is not None

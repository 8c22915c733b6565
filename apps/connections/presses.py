"""The Test's limit on a budgeted connection: presses per person and hour.

A connection's Test (``apps.connections.probe.connection_test``) makes one small call
(at most ``TEST_MAX_TOKENS`` of answer) on the connection's key. Budgets count what
runs spent (``apps.runs.budgets``: spend is read from the runs, never from a second
ledger), and a Test is no run: instead, on a connection with a budget, each person may
press Test ``TAU2_CONNECTION_TESTS_PER_HOUR`` times in any hour (0: never), which bounds
what Tests can spend there. A connection without a budget is not limited (its runs are
not either).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.connections.models import Connection, ConnectionTestPress

__all__ = ["WINDOW", "test_press_admit"]

WINDOW = timedelta(hours=1)


def test_press_admit(*, connection: Connection, user, now: datetime | None = None) -> str | None:
    """Count ``user``'s press of ``connection``'s Test and return ``None`` when it may
    go on; else why not (nothing counted), saying when it may again. Presses of one
    connection are counted under a row lock on it: two at once never both take the last."""
    if not connection.budgeted:
        return None
    limit = settings.TAU2_CONNECTION_TESTS_PER_HOUR
    now = now or timezone.now()
    since = now - WINDOW
    with transaction.atomic():
        Connection.objects.select_for_update().filter(pk=connection.pk).first()
        presses = ConnectionTestPress.objects.filter(connection=connection, user=user)
        presses.filter(at__lte=since).delete()  # out of the window: never counted again
        pressed = list(presses.order_by("at").values_list("at", flat=True))
        if len(pressed) < limit:
            ConnectionTestPress.objects.create(connection=connection, user=user, at=now)
            return None
    if limit == 0:
        return (
            f"The connection “{connection.name}” has a budget, and its Test is turned off "
            "(TAU2_CONNECTION_TESTS_PER_HOUR is 0): a run on it shows whether it works."
        )
    again = pressed[len(pressed) - limit] + WINDOW
    minutes = max(1, math.ceil((again - now).total_seconds() / 60))
    return (
        f"The connection “{connection.name}” has a budget: its Test may be pressed {limit} "
        f"time{'s' if limit != 1 else ''} an hour by each person, and you pressed it "
        f"{len(pressed)} time{'s' if len(pressed) != 1 else ''} in the last hour. Test it "
        f"again in {minutes} minute{'s' if minutes != 1 else ''}."
    )

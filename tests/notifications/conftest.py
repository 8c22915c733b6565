"""Fixtures of the notifications tests: stella (staff) from the connections' support,
a clean slate of subscriptions (team ones have no owner to be deleted with), and the
receivers."""

from __future__ import annotations

import pytest

from tests.support.connections import connections_cleared, staff, staff_client  # noqa: F401
from tests.support.webhooks import WebhookReceiver


def _clear() -> None:
    from apps.notifications.models import Subscription

    Subscription.objects.all().delete()


@pytest.fixture
def subscriptions_cleared(committed_db):
    _clear()
    yield
    _clear()


@pytest.fixture
def receiver():
    served = WebhookReceiver().start()
    yield served
    served.stop()

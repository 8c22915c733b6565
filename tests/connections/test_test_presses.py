"""The Test on a budgeted connection: each person's presses are limited per hour.

stella (staff) adds "Team Budget" (a budget of $0.01 a month) and "Team Open" (none) on
the scripted server; alice and bob, who may use both, press Test. A Test is one call on
the team's key that no run records, so no budget counts it: the limit
(``TAU2_CONNECTION_TESTS_PER_HOUR``) bounds what Tests spend there instead.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import F

from apps.connections.models import ConnectionTestPress
from apps.connections.probe import TOOL_NAME
from tests.support.connections import CONNECTION_MODEL, openai_compatible_connection
from tests.support.llm_server import tool_call


@pytest.fixture(autouse=True)
def two_an_hour(settings, connections_cleared, llm_server):
    settings.TAU2_CONNECTION_TESTS_PER_HOUR = 2
    llm_server.responder = lambda request: tool_call(TOOL_NAME, status="ok")


def press(client, connection, *, htmx: bool = True):
    return client.post(
        f"/connections/{connection.pk}/test/",
        {"model": CONNECTION_MODEL},
        headers={"HX-Request": "true"} if htmx else {},
    )


def test_a_person_presses_a_budgeted_connections_test_twice_an_hour_and_no_more(
    staff, alice_client, bob_client, llm_server
):
    budgeted = openai_compatible_connection(
        llm_server, by=staff, name="Team Budget", monthly_budget_usd=Decimal("0.01")
    )

    first, second, third = (press(alice_client, budgeted) for _ in range(3))
    plain = press(alice_client, budgeted, htmx=False)
    page = alice_client.get(plain["Location"]).content.decode()
    bobs = press(bob_client, budgeted)

    assert 'data-kind="works"' in first.content.decode()
    assert 'data-kind="works"' in second.content.decode()
    refused = third.content.decode()
    assert third.status_code == 200 and 'class="error"' in refused
    assert (
        "The connection “Team Budget” has a budget: its Test may be pressed 2 times an hour by "
        "each person, and you pressed it 2 times in the last hour. Test it again in 60 minutes."
    ) in refused
    assert plain.status_code == 302 and "you pressed it 2 times in the last hour" in page
    assert 'data-kind="works"' in bobs.content.decode()  # bob's presses are his own
    assert len(llm_server.chat_requests()) == 3  # alice's two, bob's one

    # An hour later alice may again.
    ConnectionTestPress.objects.update(at=F("at") - timedelta(minutes=61))
    assert 'class="error"' not in press(alice_client, budgeted).content.decode()
    assert len(llm_server.chat_requests()) == 4


def test_a_connection_without_a_budget_is_not_limited(staff, alice_client, llm_server):
    open_ = openai_compatible_connection(llm_server, by=staff, name="Team Open")

    answers = [press(alice_client, open_).content.decode() for _ in range(3)]

    assert all('data-kind="works"' in html and 'class="error"' not in html for html in answers)
    assert len(llm_server.chat_requests()) == 3
    assert not ConnectionTestPress.objects.exists()

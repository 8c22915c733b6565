"""A failed run's diagnosis in Chromium, at 400 px and 1,400 px: the wrong field of its
database, the first divergent write, badges on its tool calls, and no page wider than
the window. The run is played by the engine in-process (scripted customer) and stored
as the runner stores one (tests/support/scored_runs.py)."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from apps.runs.models import Run
from tests.support.scored_runs import LOOKUP, certificate, stored_run
from tests.support.scripts import GOLD_CERTIFICATE

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def failed_run(alice, llm_server) -> Run:
    """alice's run of airline/27 that sent a $149 certificate: on τ² 0.2 instead of the
    $150 one the task expects, on 1.x where it expects none (an extra write)."""
    return stored_run(alice, llm_server, [LOOKUP, certificate(149)], model="org/model-a")


@pytest.mark.parametrize("width", [400, 1400])
def test_the_diagnosis_shows_the_wrong_field_and_holds_at_any_width(
    page, alice, base_url, failed_run, width
):
    client = Client()
    client.force_login(alice)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base_url}]
    )
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/runs/{failed_run.pk}/")

    panel = page.get_by_test_id("diagnosis")
    expect(panel).to_be_visible()
    change = panel.get_by_test_id("db-change")
    expect(change).to_have_count(1)
    if GOLD_CERTIFICATE:  # 0.2: the expected certificate's amount differs
        expect(change).to_have_attribute("data-kind", "changed")
        expect(change).to_contain_text(".amount")
        expect(change).to_contain_text("150")
    else:  # 1.x: a certificate the expected database does not have
        expect(change).to_have_attribute("data-kind", "added")
        expect(change).to_contain_text("only in this run")
        expect(change).to_contain_text("payment_methods.certificate_")
    expect(change).to_contain_text("149")
    expect(page.get_by_test_id("first-divergent")).to_contain_text("send_certificate")
    badges = page.get_by_test_id("conversation").get_by_test_id("trace-badge")
    expect(badges).to_have_count(2)
    expect(badges.nth(1)).to_have_text(
        "write with different arguments" if GOLD_CERTIFICATE else "extra write"
    )
    expect(badges.nth(1)).to_be_visible()
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"the run page is {scroll} px wide at {width} px"

"""The aligned compare in Chromium at 400 px and 1,400 px: three runs of airline/27 (gold,
an extra reservation read, a $149 certificate) in aligned rows with a gap, the differing
amount marked, each column headed by its database change and first divergent write; the
columns scroll inside their wrapper and the page is never wider than the window.

Gold is task 27 as each τ² expects it (tests/support/scored_runs.py): on 0.2 the lookup and
a $150 certificate, so the $149 one differs in its amount; on 1.x the lookup alone, so the
$149 certificate is a write none of the others made (a row with two gaps)."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.support.browser import page_signed_in_as
from tests.support.scored_runs import EXTRA_READ, GOLD, LOOKUP, certificate, stored_run
from tests.support.scripts import GOLD_CERTIFICATE

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.mark.parametrize("width", [400, 1400])
def test_the_aligned_compare_holds_at_any_width(page, alice, base_url, llm_server, width):
    gold = stored_run(alice, llm_server, GOLD, model="org/gold")
    reader = stored_run(alice, llm_server, [LOOKUP, EXTRA_READ, *GOLD[1:]], model="org/reader")
    wrong = stored_run(alice, llm_server, [LOOKUP, certificate(149)], model="org/cheap")
    page = page_signed_in_as(page, alice, base_url)
    refused: list[str] = []
    page.on("console", lambda m: refused.append(m.text) if "Security Policy" in m.text else None)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/runs/compare/?ids={gold.pk},{reader.pk},{wrong.pk}")

    expect(page.get_by_test_id("compare-column")).to_have_count(3)
    rows = page.get_by_test_id("aligned-row")
    extra = rows.filter(has=page.locator('[data-name="get_reservation_details"]'))
    expect(extra).to_have_count(1)
    expect(extra.get_by_test_id("aligned-gap")).to_have_count(2)
    expect(extra.get_by_test_id("aligned-gap").first).to_be_visible()

    certificates = rows.filter(has=page.locator('[data-name="send_certificate"]'))
    expect(certificates).to_have_count(1)
    marked = certificates.locator('[data-testid="aligned-arg"][data-differs="true"] mark')
    if GOLD_CERTIFICATE:  # 0.2: three certificates, the amounts marked, 149 the odd one
        expect(certificates.get_by_test_id("aligned-gap")).to_have_count(0)
        expect(marked).to_have_count(3)
        expect(marked.nth(2)).to_contain_text("149")
    else:  # 1.x: the $149 certificate alone, facing two gaps
        expect(certificates.get_by_test_id("aligned-gap")).to_have_count(2)
        expect(certificates.get_by_test_id("aligned-call")).to_contain_text("149")
    divergent = certificates.locator('[data-divergent="true"]')
    expect(divergent).to_contain_text("first divergent write")

    last = page.get_by_test_id("compare-column").nth(2)
    expect(last.get_by_test_id("compare-db-path")).to_contain_text(
        ".amount" if GOLD_CERTIFICATE else "payment_methods.certificate_"
    )
    expect(last.get_by_test_id("compare-first-divergent")).to_have_text("send_certificate")

    # No inline style or script: the policy refuses none, the page carries none.
    assert refused == []
    expect(page.get_by_test_id("compare-scroll").locator("[style], script")).to_have_count(0)
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"the compare page is {scroll} px wide at {width} px"
    wrapper = page.get_by_test_id("compare-scroll").evaluate(
        "el => ({scroll: el.scrollWidth, client: el.clientWidth})"
    )
    if width == 400:
        assert wrapper["scroll"] > wrapper["client"], "at 400 px the columns should scroll"
        divergent.scroll_into_view_if_needed()
        box = divergent.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5
    else:
        assert wrapper["scroll"] <= wrapper["client"], "at 1,400 px all three columns fit"
        columns = page.get_by_test_id("compare-column")
        boxes = [columns.nth(i).bounding_box() for i in range(3)]
        assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
        assert boxes[2]["x"] + boxes[2]["width"] <= width

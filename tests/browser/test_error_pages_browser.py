"""The 404 page in Chromium: styled by the site's stylesheet, with no Content-Security-
Policy violation (DEBUG off, as the suite runs).

charlie is anonymous.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`);
});
"""


def test_charlie_meets_a_styled_404_page_the_policy_allows(page):
    refused: list[str] = []
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.add_init_script(LISTEN)
    response = page.goto("/runs/999999999/nothing-here/")
    assert response.status == 404
    expect(page.get_by_test_id("not-found")).to_be_visible()
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    # The stylesheet applied: the header is the site's dark bar, the panel has its border.
    header = page.locator(".site-header").evaluate("e => getComputedStyle(e).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent")
    border = page.get_by_test_id("not-found").evaluate("e => getComputedStyle(e).borderTopStyle")
    assert border == "solid"
    assert page.evaluate("window.__csp") == [] and refused == []
    page.get_by_role("link", name="Browse the tasks").click()
    page.wait_for_url("**/tasks/")

"""Every page holds at 400, 800 and 1,400 px with τ²'s longest task ids on it (telecom's,
~180 characters without a space), in Chromium: nothing widens the page, every key cell
of a table (``data-key``: status, reward, cost, …) is on screen, no word in a table is
broken between two of its letters, alice's name in the header is readable, and the
browser logs no error on any page.
"""

from __future__ import annotations

import contextlib
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.support.browser import page_signed_in_as
from tests.support.site_pages import Site, site_with_content

pytestmark = [pytest.mark.browser]

WIDTHS = (400, 800, 1400)

# For each text node in a table cell, a term, a label, a button, a chip or a heading,
# every word (a run of letters and digits without a space or a separator: _ - | / . : ,
# [ ] ( ) # $ = …) whose characters do not all sit on one line: a word broken between two
# of its letters.
BROKEN_WORDS = r"""() => {
  const broken = [];
  const cells = document.querySelectorAll(
    ".page :is(td, th, dt, label, button, a.button, .chip, .status-badge, h1, h2, h3, .crumbs)");
  const word = /[\p{L}\p{N}]{2,}/gu;
  for (const cell of cells) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.parentElement.checkVisibility()) continue;
      for (const m of node.data.matchAll(word)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()]
          .filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(`${m[0]} (in ${cell.tagName.toLowerCase()}: `
          + `"${cell.textContent.trim().slice(0, 60)}")`);
      }
    }
  }
  return broken;
}"""

# Key cells (data-key) that are rendered but not wholly inside the window.
KEYS_OFF_SCREEN = r"""(width) => [...document.querySelectorAll("[data-key]")]
  .filter(el => el.checkVisibility())
  .map(el => [el, el.getBoundingClientRect()])
  .filter(([el, box]) => box.width > 0 && (box.left < -0.5 || box.right > width + 0.5))
  .map(([el, box]) => `${el.dataset.key} "${el.textContent.trim().slice(0, 30)}" at `
    + `${Math.round(box.left)}–${Math.round(box.right)} px`)"""


# The elements that stick out of the window, innermost first (a page too wide says which).
WIDE = r"""(width) => {
  const scrolls = (el) => { for (let p = el.parentElement; p; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX; if (o === "auto" || o === "scroll" || o === "hidden")
      return p !== document.documentElement && p !== document.body; } return false; };
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.classList.length ? "." + [...el.classList].join(".") : "")
    + (el.dataset.testid ? `[${el.dataset.testid}]` : "");
  const wide = [...document.querySelectorAll("body *")].filter(el => {
    const box = el.getBoundingClientRect();
    return box.width > 0 && box.right > width + 0.5 && !scrolls(el); });
  return wide.filter(el => !wide.some(other => other !== el && el.contains(other)))
    .slice(0, 4).map(el => `${name(el)} (${Math.round(el.getBoundingClientRect().right)} px)`);
}"""


@pytest.fixture
def site(alice, llm_server, connections_cleared) -> Site:
    return site_with_content(alice=alice, llm=llm_server)


def readable_name(page, width: int) -> None:
    """alice's name in the header is readable (not white on the page's white) and inside
    the header's dark background."""
    name = page.get_by_test_id("username")
    expect(name).to_be_visible()
    colours = name.evaluate(
        """(el) => {
          const clear = (node) => getComputedStyle(node).backgroundColor === "rgba(0, 0, 0, 0)";
          let bg = el;
          const colour = getComputedStyle(el).color;
          while (bg && clear(bg)) bg = bg.parentElement;
          const box = el.getBoundingClientRect();
          const header = el.closest("header").getBoundingClientRect();
          return {colour, background: bg ? getComputedStyle(bg).backgroundColor : "none",
                  inside: box.right <= header.right + 0.5 && box.bottom <= header.bottom + 0.5};
        }"""
    )
    assert colours["colour"] != colours["background"], colours
    assert colours["inside"], f"the name is outside the header's background at {width} px"


def layout_problems(page, width: int) -> list[str]:
    """What is wrong with the open page at ``width``, in words (empty: it holds)."""
    problems = []
    scroll = page.evaluate("document.documentElement.scrollWidth")
    if scroll > width:
        wide = ", ".join(page.evaluate(WIDE, width))
        problems.append(f"the page is {scroll} px wide ({wide})")
    problems += [f"key cell off screen: {k}" for k in page.evaluate(KEYS_OFF_SCREEN, width)]
    broken = dict.fromkeys(page.evaluate(BROKEN_WORDS))  # once each, in order
    problems += [f"word broken mid-letter: {w}" for w in list(broken)[:8]]
    return problems


@pytest.mark.parametrize("width", WIDTHS)
def test_every_page_holds_with_the_longest_task_ids_and_logs_no_error(
    page, base_url, alice, site, width
):
    assert len(site.longest.task_id) > 150 and site.longest.domain_id == "telecom"
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_viewport_size({"width": width, "height": 900})
    failures = {}
    for visit in site.pages():
        page.context.clear_cookies()
        if visit.who == "alice":
            page_signed_in_as(page, alice, base_url)
        errors.clear()
        response = page.goto(visit.path)
        page.wait_for_load_state("networkidle")
        problems = [] if response.ok else [f"answered {response.status}"]
        problems += layout_problems(page, width)
        problems += [f"console: {e}" for e in errors]
        if visit.who == "alice":
            readable_name(page, width)
        if problems:
            failures[f"{visit.name} ({visit.path[:60]})"] = problems
    assert not failures, f"at {width} px:\n" + "\n".join(
        f"{name}: {'; '.join(problems)}" for name, problems in failures.items()
    )


def test_the_run_page_says_how_the_conversation_ended_and_where_it_is(page, base_url, alice, site):
    page = page_signed_in_as(page, alice, base_url)
    page.goto(site.run.get_absolute_url())
    expect(page.get_by_test_id("stop-marker")).to_contain_text(
        "The customer ended the conversation"
    )
    expect(page.get_by_test_id("conversation")).not_to_contain_text("STOP")
    expect(page.locator('nav[aria-label="Main"] a[aria-current="page"]')).to_have_text("Runs")
    expect(page.get_by_test_id("nav-policy")).to_have_attribute("href", "/tasks/telecom/")


def test_the_checks_find_a_broken_word_and_a_key_cell_off_screen(page, base_url, alice):
    """The layout checks can fail: a table that breaks its words anywhere and pushes its
    last cell past the window's edge is caught by both."""
    page = page_signed_in_as(page, alice, base_url)
    page.set_viewport_size({"width": 400, "height": 900})
    page.goto("/accounts/sign-in/")
    page.evaluate(
        """() => {
          const main = document.querySelector(".page");
          main.insertAdjacentHTML("beforeend",
            `<table><tr>
               <td style="width: 40px; word-break: break-all">Downloads completed</td>
               <td style="min-width: 700px">a wide column</td>
               <td data-key="cost">$0.036</td></tr></table>`);
        }"""
    )
    problems = layout_problems(page, 400)
    assert any("word broken mid-letter: Downloads" in p for p in problems), problems
    assert any("key cell off screen: cost" in p for p in problems), problems


def test_the_evaluation_charts_shrink_when_the_window_narrows(page, base_url, alice, site):
    page = page_signed_in_as(page, alice, base_url)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(site.evaluation.get_absolute_url())
    charts = [page.get_by_test_id("pass-k-chart"), page.get_by_test_id("reward-chart")]
    page.wait_for_function("() => window.Chart && Object.keys(Chart.instances).length === 2")
    wide = [chart.bounding_box()["width"] for chart in charts]
    assert wide[1] > 600, wide
    page.set_viewport_size({"width": 400, "height": 900})
    # Chart.js resizes on its container's ResizeObserver, a frame or two later.
    fits = (
        "() => [...document.querySelectorAll('.plot canvas')]"
        ".every(c => c.getBoundingClientRect().right <= 400)"
    )
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(fits, timeout=5_000)
    narrow = [chart.bounding_box() for chart in charts]
    assert all(box["x"] + box["width"] <= 400 for box in narrow), f"{wide} px wide, then {narrow}"
    assert page.evaluate("document.documentElement.scrollWidth") <= 400


def test_the_evaluations_breakdowns_stack_at_400_px_with_every_number_on_screen(
    page, base_url, alice, site
):
    # At 400 px each group of the paper's breakdowns is a card: its label, then its
    # pass^1, 95% CI and n, each named, nothing to scroll sideways to.
    page = page_signed_in_as(page, alice, base_url)
    page.set_viewport_size({"width": 400, "height": 900})
    page.goto(site.evaluation.get_absolute_url())
    groups = page.get_by_test_id("breakdowns").get_by_test_id("breakdown-group")
    expect(groups.first).to_be_visible()
    tables = page.locator(".breakdown-table")
    assert tables.count() > 0
    assert tables.evaluate_all("ts => ts.every(t => t.scrollWidth <= t.clientWidth + 1)")
    for index in range(groups.count()):
        row = groups.nth(index)
        for label in ("pass^1", "95% CI", "n"):
            cell = row.locator(f'td[data-label="{label}"]')
            box = cell.bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 400, (
                row.get_attribute("data-group"),
                label,
                box,
            )


def test_compare_sorts_on_a_phone_where_its_sorting_headers_are_hidden(page, base_url, alice, site):
    page = page_signed_in_as(page, alice, base_url)
    url = f"/evaluations/compare/?ids={site.evaluation.pk},{site.other_evaluation.pk}"
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(url)
    expect(page.get_by_test_id("sort-delta")).to_be_visible()
    expect(page.get_by_test_id("sort-narrow")).to_be_hidden()

    page.set_viewport_size({"width": 400, "height": 900})
    expect(page.get_by_test_id("sort-delta")).to_be_hidden()
    page.get_by_test_id("sort-narrow-key").select_option("delta")
    page.get_by_test_id("sort-narrow-dir").select_option("desc")
    page.get_by_test_id("sort-narrow-apply").click()

    expect(page).to_have_url(re.compile(r"sort=delta&dir=desc$"))
    expect(page.get_by_test_id("sort-narrow-key")).to_have_value("delta")
    expect(page.get_by_test_id("sort-narrow-dir")).to_have_value("desc")
    deltas = [
        float(text)
        for text in page.locator(
            '[data-testid=compare-task] td[data-key="delta"]'
        ).all_inner_texts()
        if text.strip() != "—"
    ]
    assert len(deltas) > 1 and deltas == sorted(deltas, reverse=True), deltas
    assert layout_problems(page, 400) == []

"""Charlie, anonymous, finds a task in Chromium: searches, filters, opens it."""

import re

import pytest
from django.db.models.functions import Length
from playwright.sync_api import expect

from apps.tasks.models import Task

pytestmark = [pytest.mark.browser, pytest.mark.django_db]


def test_charlie_searches_filters_and_opens_a_task(page):
    page.goto("/tasks/")
    count = page.get_by_test_id("count")
    expect(count).to_contain_text("20 of 20 tasks")
    expect(page.get_by_test_id("task-card")).to_have_count(20)

    page.get_by_test_id("domain").select_option("retail")
    expect(count).to_contain_text("of 40 tasks")  # retail / test
    expect(page).to_have_url(re.compile(r"domain=retail"))

    page.get_by_test_id("q").fill("desk lamp")
    expect(count).to_contain_text("“desk lamp”")
    expect(page).to_have_url(re.compile(r"q=desk\+lamp"))
    cards = page.get_by_test_id("task-card")
    expect(cards.first).to_be_visible()
    n_all = cards.count()

    page.get_by_label("Read-only").check()
    expect(count).to_contain_text("read-only")
    expect(page).to_have_url(re.compile(r"kind=read"))
    n_read = page.get_by_test_id("task-card").count()

    page.get_by_label("Changes the database").check()
    expect(count).to_contain_text("changes the database")
    n_write = page.get_by_test_id("task-card").count()
    assert n_read + n_write == n_all

    page.locator('[data-task-id="5"] a').click()
    expect(page).to_have_url(re.compile(r"/tasks/retail/5/$"))
    expect(page.get_by_test_id("task-title")).to_have_text(
        "You want to exchange the water bottle and the desk lamp."
    )
    expect(page.get_by_test_id("hidden-banner")).to_contain_text("Hidden from the agent")
    expect(page.get_by_test_id("knowledge")).to_contain_text("mei_kovacs_8020")
    expect(page.get_by_test_id("expected-actions")).to_contain_text("return_delivered_order_items")
    expect(page.get_by_test_id("policy")).to_contain_text("Retail")

    page.go_back()
    expect(page).to_have_url(re.compile(r"kind=write"))
    expect(page.get_by_test_id("q")).to_have_value("desk lamp")


def test_a_shared_explorer_url_opens_with_its_filters(page):
    page.goto("/tasks/?domain=telecom&split=full&q=roaming&kind=write")
    expect(page.get_by_test_id("count")).to_contain_text("of 2,285 tasks")
    expect(page.get_by_test_id("split")).to_have_value("full")
    expect(page.get_by_label("Changes the database")).to_be_checked()
    page.get_by_role("link", name="Next →").click()
    expect(page).to_have_url(re.compile(r"page=2"))
    expect(page.get_by_text(re.compile(r"Page 2 of \d+"))).to_be_visible()


# Each name of the task id in the breadcrumb: its text and on how many lines it lies.
CRUMB_PARTS = """() => [...document.querySelectorAll('.crumbs .id-part')]
  .map(el => [el.textContent, el.getClientRects().length])"""


def test_a_telecom_tasks_breadcrumb_breaks_between_its_names_at_400_px(page):
    task = (
        Task.objects.filter(domain_id="telecom", task_id__contains="data_saver_mode_on")
        .order_by(Length("task_id").desc())
        .first()
    )
    page.set_viewport_size({"width": 400, "height": 900})
    page.goto(task.get_absolute_url())

    parts = page.evaluate(CRUMB_PARTS)
    assert "".join(text for text, _ in parts) == task.task_id
    assert any(text.startswith("data_saver_mode_on") for text, _ in parts)
    assert [text for text, lines in parts if lines != 1] == []  # no name split
    crumbs = page.locator(".crumbs").bounding_box()
    line = page.locator(".crumbs .id-part").first.bounding_box()
    assert crumbs["height"] > 2 * line["height"]  # it does wrap: between names
    assert page.evaluate("document.documentElement.scrollWidth") <= 400

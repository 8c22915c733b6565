"""stella (staff) labels a customer's message on alice's run page in Chromium, through
htmx, from the message's menu, and deletes it again (after saying yes); the page never
leaves, and the Content-Security-Policy reports nothing. A message that arrives live can be
labelled too."""

import threading

import pytest
from playwright.sync_api import expect

from apps.runs.events import events_publish
from apps.runs.models import ReviewLabel
from tests.support.browser import page_signed_in_as
from tests.support.review import staff_member, stored_run

pytestmark = [pytest.mark.browser]


def publish_as_a_worker(run, messages: list[dict]) -> None:
    """Store and announce ``messages`` from a thread of their own, as a worker does.

    Not from the test's thread: Playwright's loop may show as running there (it does once an
    async test has run in this process), and the publisher's ``async_to_sync`` then refuses,
    so the live message was stored but never announced.
    """

    def publish():
        from django.db import connection

        try:
            events_publish(run=run, messages=messages)
        finally:
            connection.close()

    thread = threading.Thread(target=publish)
    thread.start()
    thread.join(timeout=30)


def open_label_form(page, seq: int) -> None:
    """Through message ``seq``'s menu, as a person does."""
    message = page.locator(f"#message-{seq}")
    message.get_by_test_id("message-actions").click()
    message.get_by_test_id("label-message").click()


def test_stella_labels_a_message_on_the_run_page_and_deletes_it(page, alice, base_url):
    stella = staff_member("stella")
    run = stored_run(alice, reward=0.0, messages=3)
    page_signed_in_as(page, stella, base_url)
    refused = []
    page.on("console", lambda m: "Content Security Policy" in m.text and refused.append(m.text))

    page.goto(f"/runs/{run.pk}/")
    slot = page.locator("#review-1")
    open_label_form(page, 1)
    form = slot.get_by_test_id("label-form")
    form.get_by_label("Category").select_option("user_sim_error")
    form.get_by_label("Severity").select_option("critical")
    form.get_by_label("Note").fill("The customer invented a reservation.")
    form.get_by_test_id("save-label").click()

    shown = page.locator("#review-1").get_by_test_id("review-label")
    expect(shown).to_contain_text("user-simulator error")
    expect(shown).to_contain_text("The customer invented a reservation.")
    expect(page.locator("#review-1 details.review-add")).not_to_have_attribute("open", "")
    assert page.url.endswith(f"/runs/{run.pk}/")  # htmx swapped the slot in place
    label = ReviewLabel.objects.get(run=run)
    assert (label.event.seq, label.severity, label.created_by) == (1, "critical", stella)
    expect(page.locator("#review-0").get_by_test_id("review-label")).to_have_count(0)

    page.reload()
    expect(page.locator("#review-1").get_by_test_id("review-label")).to_have_count(1)
    page.once("dialog", lambda dialog: dialog.accept())  # "Delete this label …?"
    page.locator("#review-1").get_by_test_id("delete-label").click()
    expect(page.locator("#review-1").get_by_test_id("review-label")).to_have_count(0)
    assert not ReviewLabel.objects.filter(run=run).exists()
    assert refused == []


def test_a_message_that_arrives_live_gets_its_label_form(page, alice, base_url):
    run = stored_run(alice, status="running", reward=None, messages=1)
    page_signed_in_as(page, staff_member("stella"), base_url)
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("#message-0").get_by_test_id("label-message")).to_have_count(1)
    expect(page.locator("#review-0")).to_have_count(1)
    expect(page.get_by_test_id("live")).to_have_text("Live…")

    publish_as_a_worker(run, [{"role": "user", "content": "I never booked that."}])
    expect(page.get_by_test_id("event")).to_have_count(2)
    expect(page.locator("#review-1")).to_have_count(1)  # review.js brought its slot
    slot = page.locator("#review-1")
    open_label_form(page, 1)
    slot.get_by_label("Category").select_option("user_sim_error")
    slot.get_by_test_id("save-label").click()
    expect(page.locator("#review-1").get_by_test_id("review-label")).to_contain_text(
        "user-simulator error"
    )
    # The slot sits right after its message, not at the end of the conversation.
    assert page.locator('[data-testid="event"][data-seq="1"] + #review-1').count() == 1
    assert ReviewLabel.objects.get(run=run).event.seq == 1

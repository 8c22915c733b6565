"""alice plays airline task 27 in Chromium and the customer's model is slow to answer her
message (issue 33): the play page says the customer's call waits, then that it is rate
limited and retried once the provider's Retry-After is over ("retrying in 9 s (2 of 3)"),
also after a reload in the middle; once the customer answers, the line is gone. Real ASGI
app, Celery worker and litellm, scripted LLM."""

from __future__ import annotations

import re
import threading

import pytest
from playwright.sync_api import expect

from tests.play.conftest import customer_says
from tests.support.browser import page_signed_in_as
from tests.support.llm_server import error, text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLOW = 30_000
OPENING = "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."


def test_alice_sees_the_customers_call_wait_and_retry_after_her_message(
    page, alice, base_url, celery_worker, llm_server
):
    customer_says(llm_server, OPENING)
    page = page_signed_in_as(page, alice, base_url)
    page.goto("/tasks/airline/27/")
    page.get_by_test_id("play").click()
    page.get_by_test_id("start-play").click()
    expect(page).to_have_url(re.compile(r"/play/\d+/$"))
    expect(page.locator('[data-testid="event"][data-kind="customer"]')).to_contain_text(
        "ethan_martin_2396", timeout=SLOW
    )
    line = page.get_by_test_id("play-call")
    expect(line).to_be_hidden()

    # Her message: the customer's first attempt is held, then rate limited with a
    # Retry-After of 10 s; the second is held too, then answers.
    first, second = threading.Event(), threading.Event()
    let_first, let_second = threading.Event(), threading.Event()
    asked: list = []

    def responder(request):
        asked.append(request)
        if len(asked) == 1:
            first.set()
            let_first.wait(timeout=7)  # within the worker's 8 s timeout
            return error(429, "slow down", retry_after="10")
        second.set()
        let_second.wait(timeout=7)
        return text("Thank you, that is all I needed.")

    llm_server.responder = responder
    try:
        page.get_by_test_id("say-text").fill("I can offer you a certificate.")
        page.get_by_test_id("say-text").press("Enter")
        assert first.wait(timeout=60)
        expect(line).to_contain_text("customer: waiting for the model's answer", timeout=SLOW)
        let_first.set()
        expect(line).to_contain_text(
            re.compile(r"customer: rate limited \(HTTP 429\), retrying in \d+ s \(2 of 3\)")
        )
        assert second.wait(timeout=30)
        assert asked[1].received_at - asked[0].received_at >= 10  # not asked again sooner
        page.reload()  # the call under way is shown at once on a page opened meanwhile
        expect(line).to_contain_text("customer: rate limited (HTTP 429), retrying (2 of 3), ")
        assert len(asked) == 2
    finally:
        let_first.set()
        let_second.set()
    expect(page.locator('[data-testid="event"][data-kind="customer"]').last).to_contain_text(
        "that is all I needed", timeout=SLOW
    )
    expect(line).to_be_hidden()

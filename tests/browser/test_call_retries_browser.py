"""A retried model call, watched in Chromium (issue 33): alice opens her run while the
customer's model answers 503; the page's live line says "customer: provider unavailable
(HTTP 503), retrying (2 of 3)" while the second attempt is under way, and once the run
has ended the customer's message reads "… · 3 attempts", a disclosure that opens from the
keyboard on each attempt, as a reload shows it. On the production path: real ASGI app,
Celery worker, scripted LLM."""

import threading

import pytest
from playwright.sync_api import expect

from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.runs.conftest import (  # noqa: F401
    AGENT_MODEL,
    agent_models,
    gold_script,
    is_agent_request,
)
from tests.support.browser import page_signed_in_as
from tests.support.llm_server import delayed, error
from tests.support.run_page import run_body_html, wait_until_ended_live

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_alice_sees_a_retry_as_it_happens_and_the_attempts_on_the_message(
    page, alice, base_url, celery_worker, llm_server
):
    gold_script(llm_server)
    gold = llm_server.responder
    watching = threading.Event()  # the page is open: the first attempt may fail now
    lock = threading.Lock()
    customer: list = []

    def responder(request):
        if not is_agent_request(request):
            with lock:
                customer.append(request)
                n = len(customer)
            if n == 1:
                watching.wait(timeout=5)  # within the worker's 8 s timeout
                return error(503, "overloaded")
            if n == 2:  # the second attempt takes a while: the page says so meanwhile
                return delayed(error(503, "overloaded"), 3.0)
        return gold(request)

    llm_server.responder = responder
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = run_create(
        user=alice, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=301)
    )
    page = page_signed_in_as(page, alice, base_url)
    page.goto(f"/runs/{run.pk}/")
    page.wait_for_timeout(1000)  # its socket opened (the first attempt is held till now)
    watching.set()
    live = page.get_by_test_id("live")

    expect(live).to_contain_text(
        "customer: provider unavailable (HTTP 503), retrying (2 of 3)", timeout=10_000
    )
    wait_until_ended_live(page)

    attempts = page.locator("#message-1 [data-testid=attempts]")
    expect(attempts.locator("summary")).to_have_text("3 attempts")
    items = attempts.locator("li")
    expect(items.first).to_be_hidden()
    # Opened from the keyboard, as a screen reader's user would: each attempt in order.
    attempts.locator("summary").focus()
    page.keyboard.press("Enter")
    expect(items).to_have_count(3)
    expect(items.first).to_be_visible()
    expect(items.first).to_contain_text("customer: provider unavailable (HTTP 503), ")
    expect(items.nth(2)).to_contain_text("customer: answered, ")
    page.keyboard.press("Enter")
    expect(items.first).to_be_hidden()
    live_html = run_body_html(page)
    page.reload()
    assert run_body_html(page) == live_html


def test_a_page_opened_mid_call_shows_the_retry_under_way(
    page, alice, base_url, celery_worker, llm_server
):
    # The customer's first attempt fails; its second is held by the server while alice
    # opens the page, and reloads it: both times the line says which attempt is under way,
    # though no notice was sent since (apps.runs.current_call kept it).
    gold_script(llm_server)
    gold = llm_server.responder
    second = threading.Event()  # the second attempt reached the server
    release = threading.Event()  # the test saw what it wanted: the attempt may answer
    lock = threading.Lock()
    customer: list = []

    def responder(request):
        if not is_agent_request(request):
            with lock:
                customer.append(request)
                n = len(customer)
            if n == 1:
                return error(503, "overloaded")
            if n == 2:
                second.set()
                release.wait(timeout=7)  # within the worker's 8 s timeout
        return gold(request)

    llm_server.responder = responder
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = run_create(
        user=alice, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=302)
    )
    assert second.wait(timeout=60)
    page = page_signed_in_as(page, alice, base_url)
    live = page.get_by_test_id("live")
    try:
        page.goto(f"/runs/{run.pk}/")
        expect(live).to_contain_text(
            "customer: provider unavailable (HTTP 503), retrying (2 of 3), "
        )
        page.reload()
        expect(live).to_contain_text("retrying (2 of 3)")
        with lock:
            assert len(customer) == 2  # no notice came since: the line is the kept one
    finally:
        release.set()
    wait_until_ended_live(page)
    expect(live).to_have_text("")

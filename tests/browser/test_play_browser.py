"""alice plays airline task 27 as the agent in Chromium, through the tool form, against the
scripted customer on a real Celery worker, and reaches reward 1.0; the session resumes
after a reload and lands in the team's history and on the compare page.

Task 27's gold differs by generation (tests/support/scripts.py): τ² 0.2 expects the $150
certificate, 1.x the lookup alone, so there she sends none and says so."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from playwright.sync_api import expect

from apps.runs.models import Run
from tests.play.conftest import customer_says
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import GOLD_CERTIFICATE, GOLD_CLOSING

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Server round trips (a tool call rebuilds τ²'s environment; the customer answers on the
# worker) are slower than Playwright's 5 s default on a busy machine.
SLOW = 30_000
OPENING = "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."


@pytest.fixture
def alice_page(page, alice, base_url):
    """Chromium with alice's session cookie (as if she had signed in)."""
    client = Client()
    client.force_login(alice)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base_url}]
    )
    return page


def call_tool(page, name: str, **arguments: str) -> None:
    page.get_by_test_id("tool-name").select_option(name)
    for field, value in arguments.items():
        page.get_by_test_id(f"arg-{field}").fill(value)


def test_alice_plays_task_27_to_reward_one_through_the_form(
    alice_page, celery_worker, llm_server, alice
):
    page = alice_page
    customer_says(llm_server, OPENING, "Wonderful, thank you so much!")
    events = page.get_by_test_id("conversation").get_by_test_id("event")

    page.goto("/tasks/airline/27/")
    page.get_by_test_id("play").click()
    page.get_by_test_id("start-play").click()
    expect(page).to_have_url(re.compile(r"/play/\d+/$"))
    run = Run.objects.get(kind=Run.Kind.HUMAN, created_by=alice)
    expect(page.locator('[data-testid="event"][data-kind="customer"]')).to_contain_text(
        "ethan_martin_2396", timeout=SLOW
    )
    expect(page.get_by_test_id("policy")).to_contain_text("airline")

    call_tool(page, "get_user_details", user_id="ethan_martin_2396")
    expect(page.get_by_test_id("tool-preview")).to_contain_text('"user_id": "ethan_martin_2396"')
    page.get_by_test_id("call-tool").click()
    expect(page.get_by_test_id("tool-result-inline")).to_contain_text("Ethan", timeout=SLOW)
    expect(events).to_have_count(4, timeout=SLOW)

    # Ill-typed and missing arguments are shown next to their fields; nothing is sent.
    call_tool(page, "send_certificate", amount="a lot")
    page.get_by_test_id("call-tool").click()
    errors = page.get_by_test_id("field-error")
    expect(errors.filter(has_text="Must be an integer.")).to_have_count(1)
    expect(errors.filter(has_text="Required.")).to_have_count(1)
    assert run.events.count() == 4

    # A reload in the middle continues where it stopped.
    page.reload()
    expect(events).to_have_count(4)
    expect(page.get_by_test_id("say-text")).to_be_enabled()

    if GOLD_CERTIFICATE:  # τ² 0.2's task 27 owes the $150 certificate; 1.x's none
        call_tool(page, "send_certificate", user_id="ethan_martin_2396", amount="150")
        expect(page.get_by_test_id("tool-preview")).to_contain_text('"amount": 150')
        page.get_by_test_id("call-tool").click()
        expect(events).to_have_count(6, timeout=SLOW)

    page.get_by_test_id("say-text").fill(
        "I have sent you a $150 certificate for the delay." if GOLD_CERTIFICATE else GOLD_CLOSING
    )
    page.get_by_test_id("say-text").press("Enter")
    expect(events.nth(5 + 2 * GOLD_CERTIFICATE)).to_contain_text("Wonderful", timeout=SLOW)
    expect(page.get_by_test_id("say-text")).to_be_enabled(timeout=SLOW)

    page.get_by_test_id("end").click()
    expect(page.get_by_test_id("reward")).to_have_text("1.00", timeout=SLOW)
    # An ended session looks ended: no controls left, and the end is a mark, not a bubble.
    expect(page.get_by_test_id("session-ended")).to_be_visible()
    expect(page.get_by_test_id("play-controls")).to_have_count(0)
    expect(page.get_by_test_id("stop-marker")).to_contain_text("The agent ended the conversation")
    expect(page.get_by_test_id("conversation")).not_to_contain_text("STOP")

    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED and run.reward == 1.0
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}

    # The session is in the team's history and compares with a model run of the task.
    other = Run.objects.create(
        kind=Run.Kind.MODEL,
        task=run.task,
        domain="airline",
        created_by=alice,
        agent_model="Qwen/Qwen3-32B",
        user_model=run.user_model,
        status=Run.Status.COMPLETED,
        reward=0.0,
    )
    page.goto("/runs/?kind=play")
    expect(page.locator(f'[data-testid="run-row"][data-run-id="{run.pk}"]')).to_be_visible()
    page.goto(f"/runs/compare/?ids={run.pk},{other.pk}")
    expect(page.get_by_test_id("compare-column")).to_have_count(2)
    expect(page.get_by_test_id("compare")).to_contain_text("Qwen/Qwen3-32B")

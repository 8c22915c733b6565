"""The run page while you watch: stella (staff, a reviewer) opens alice's run while it goes on
and watches it to the end, in Chromium, on the production path (real ASGI app, a Celery
worker process, the scripted LLM). What the page then shows is what a reload shows, byte
for byte but the CSRF tokens: the diagnosis, the trace badges, each message's menu with
"Fork here" and "Label message", the review forms."""

import difflib
import threading

import pytest
from playwright.sync_api import expect

from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.runs.conftest import (  # noqa: F401
    AGENT_MODEL,
    agent_models,
    finished,
    gold_script,
    is_agent_request,
    wait_for,
)
from tests.support.browser import page_signed_in_as
from tests.support.review import staff_member
from tests.support.run_page import run_body_html, wait_until_ended_live
from tests.support.scripts import GOLD_CLOSING_SEQ

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def assert_same(live: str, reloaded: str) -> None:
    if live != reloaded:
        diff = difflib.unified_diff(
            reloaded.splitlines(), live.splitlines(), "reload", "live", lineterm="", n=1
        )
        pytest.fail("the live page differs from a reload:\n" + "\n".join(list(diff)[:80]))


def held_before_its_last_message(llm_server) -> threading.Event:
    """The gold script, with the customer's last reply held until the returned event is
    set: till then the run is going, its messages 0..GOLD_CLOSING_SEQ stored."""
    gold_script(llm_server)
    gold = llm_server.responder
    release = threading.Event()

    def responder(request):
        if not is_agent_request(request) and "certificate" in request.text():
            release.wait(timeout=120)
        return gold(request)

    llm_server.responder = responder
    return release


def test_a_run_watched_to_its_end_shows_what_a_reload_shows(
    page, alice, base_url, celery_worker, llm_server
):
    release = held_before_its_last_message(llm_server)
    stella = staff_member("stella")
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = run_create(
        user=alice, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=300)
    )
    page = page_signed_in_as(page, stella, base_url)

    try:
        page.goto(f"/runs/{run.pk}/")
        # The page was rendered while the run went on: what follows came live.
        assert page.locator("#run").get_attribute("data-final") == "false"
        expect(page.get_by_test_id("diagnosis")).to_have_count(0)
        expect(page.get_by_test_id("fork-here")).to_have_count(0)

        # While it goes on, the messages that came live are a reload's: each with its menu
        # and stella's label slot.
        expect(page.locator(f"#message-{GOLD_CLOSING_SEQ}")).to_be_visible(timeout=60_000)
        expect(page.locator(f"#review-{GOLD_CLOSING_SEQ}")).to_have_count(1)
        reload = page.context.new_page()
        reload.goto(f"/runs/{run.pk}/")
        assert reload.locator("#run").get_attribute("data-final") == "false"
        assert_same(run_body_html(page, running=True), run_body_html(reload, running=True))
        reload.close()
    finally:
        release.set()

    wait_until_ended_live(page)
    run = wait_for(run, finished)
    assert run.reward == 1.0, run.error
    messages = run.events.count()
    expect(page.get_by_test_id("reward")).to_have_text("1.00")
    expect(page.get_by_test_id("diagnosis")).to_be_visible()
    expect(page.get_by_test_id("conversation").get_by_test_id("event")).to_have_count(messages)
    expect(page.get_by_test_id("trace-badge").first).to_be_visible()
    expect(page.get_by_test_id("label-message")).to_have_count(messages)
    assert page.get_by_test_id("fork-here").count() > 0
    expect(page.get_by_test_id("seed")).to_have_text(f"seed 300 (trial 0 → {run.seed})")
    live = run_body_html(page)

    page.reload()
    expect(page.get_by_test_id("diagnosis")).to_be_visible()
    assert_same(live, run_body_html(page))


def test_a_label_being_written_when_the_run_ends_is_kept(
    page, alice, base_url, celery_worker, llm_server
):
    release = held_before_its_last_message(llm_server)
    stella = staff_member("stella")
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = run_create(
        user=alice, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=300)
    )
    page = page_signed_in_as(page, stella, base_url)
    try:
        page.goto(f"/runs/{run.pk}/")
        expect(page.locator("#review-1")).to_have_count(1, timeout=60_000)
        page.locator("#message-1").get_by_test_id("message-actions").click()
        page.locator("#message-1").get_by_test_id("label-message").click()
        form = page.locator("#review-1").get_by_test_id("label-form")
        form.get_by_label("Note").fill("The customer gave her id unasked.")
        assert not Run.objects.get(pk=run.pk).is_final
    finally:
        release.set()

    wait_until_ended_live(page)
    expect(page.get_by_test_id("diagnosis")).to_be_visible()
    form = page.locator("#review-1").get_by_test_id("label-form")
    expect(form).to_be_visible()
    expect(form.get_by_label("Note")).to_have_value("The customer gave her id unasked.")
    form.get_by_label("Category").select_option("user_sim_error")
    form.get_by_test_id("save-label").click()
    expect(page.locator("#review-1").get_by_test_id("review-label")).to_contain_text(
        "The customer gave her id unasked."
    )


def test_each_message_has_one_menu_that_links_forks_and_labels_it(
    page, alice, base_url, celery_worker, llm_server
):
    gold_script(llm_server)
    stella = staff_member("stella")
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = run_create(
        user=alice, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=300)
    )
    run = wait_for(run, finished)
    page = page_signed_in_as(page, stella, base_url)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto(f"/runs/{run.pk}/")

    # Nothing of the menus shows until one is opened, and no label form takes room.
    expect(page.get_by_test_id("fork-here").first).to_be_hidden()
    expect(page.get_by_test_id("label-form").first).to_be_hidden()
    customer = page.locator("#message-1")
    menu = customer.get_by_test_id("message-menu")
    menu.get_by_test_id("message-actions").focus()
    page.keyboard.press("Enter")  # a <details>: opens from the keyboard
    expect(menu.get_by_test_id("copy-link")).to_be_visible()
    expect(menu.get_by_test_id("label-message")).to_have_text("Label message 1")
    page.keyboard.press("Escape")
    expect(menu.get_by_test_id("copy-link")).to_be_hidden()

    menu.get_by_test_id("message-actions").click()
    menu.get_by_test_id("copy-link").click()
    expect(menu.get_by_test_id("copy-link")).to_have_text("Copied")
    copied = page.evaluate("() => navigator.clipboard.readText()")
    assert copied == f"{base_url}/runs/{run.pk}/#message-1"

    # "Label message 1" opens that message's form right below it; saving it shows the label
    # where the form was, and no empty toggle is left behind.
    menu.get_by_test_id("label-message").click()  # the menu stayed open to say "Copied"
    expect(menu.get_by_test_id("copy-link")).to_be_hidden()  # and closed on its way
    slot = page.locator("#review-1")
    form = slot.get_by_test_id("label-form")
    expect(form).to_be_visible()
    form.get_by_label("Category").select_option("user_sim_error")
    form.get_by_test_id("save-label").click()
    expect(slot.get_by_test_id("review-label")).to_contain_text("user-simulator error")
    expect(slot.get_by_test_id("label-form")).to_be_hidden()
    expect(slot.get_by_test_id("add-label")).to_be_hidden()
    expect(page.locator("#review-2")).to_be_hidden()  # the next message's empty slot takes no room

    # Deleting it asks first; "Cancel" keeps it.
    page.once("dialog", lambda dialog: dialog.dismiss())
    slot.get_by_test_id("delete-label").click()
    expect(slot.get_by_test_id("review-label")).to_have_count(1)
    page.once("dialog", lambda dialog: dialog.accept())
    slot.get_by_test_id("delete-label").click()
    expect(page.locator("#review-1").get_by_test_id("review-label")).to_have_count(0)
    assert not run.labels.exists()

"""The pickers in Chromium: alice picks the customer's model with the one model picker on
the run form and on play's start form (where she also picks the task with the run form's
task picker); typing in the evaluation form logs no console error; the task picker's rows
start their title at the row's left edge and keep it readable at 1,400 and 400 px.
On the production path (real ASGI app, a Celery worker process, the scripted LLM).
"""

import re

import pytest
from playwright.sync_api import expect

from apps.runs.models import Run
from apps.tasks.models import Task
from tests.support.browser import page_signed_in_as
from tests.support.connections import CONNECTION_MODEL, openai_compatible_connection
from tests.support.llm_server import text
from tests.support.scripts import AGENT_MODEL, is_agent_request, refresh_agent_models

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CUSTOMER = "Qwen/Qwen3-32B"  # the scripted router's other model: not the server's default


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server):
    return refresh_agent_models()


@pytest.fixture
def alices_page(page, alice, base_url):
    return page_signed_in_as(page, alice, base_url)


def short_conversation(request):
    if is_agent_request(request):
        return text("Sorry, I cannot help with that today.")
    if "cannot help" in request.text():
        return text("Alright, bye. ###STOP###")
    return text("Hi, I would like to change my flight.")


def console_errors(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def pick_customer(page) -> None:
    """Narrow the customer's picker with its search box, then pick ``CUSTOMER``."""
    search = page.locator('input.model-search[data-picker="id_user_model"]')
    expect(search).to_be_visible()
    search.fill("qwen3")
    picker = page.get_by_test_id("customer-picker")
    hidden = picker.locator("option", has_text="DeepSeek").evaluate_all(
        "options => options.filter((o) => !o.selected).map((o) => o.hidden)"
    )
    assert hidden and all(hidden)  # the search narrowed the list (but for the one chosen)
    picker.select_option(CUSTOMER)


def test_alice_picks_the_customer_on_the_run_form(alices_page, celery_worker, llm_server):
    page, errors = alices_page, console_errors(alices_page)
    llm_server.responder = short_conversation
    page.goto("/runs/new/?domain=airline&task=27")
    expect(page.get_by_label("Step limit")).to_have_value("200")  # the shared default
    page.get_by_test_id("model-picker").select_option(AGENT_MODEL)
    pick_customer(page)
    page.get_by_label("Step limit").fill("20")
    page.get_by_test_id("start-run").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    assert (run.agent_model, run.user_model, run.max_steps) == (AGENT_MODEL, CUSTOMER, 20)
    expect(page.get_by_test_id("status")).to_have_text("completed", timeout=60_000)
    assert errors == []


def test_alice_picks_the_task_and_the_customer_on_plays_start_form(
    alices_page, celery_worker, llm_server
):
    page, errors = alices_page, console_errors(alices_page)
    llm_server.responder = short_conversation
    page.goto("/play/new/")
    expect(page.get_by_test_id("picker-count")).to_contain_text("airline/base")
    page.get_by_test_id("task-input").fill("certificate")
    expect(page.get_by_test_id("picker-count")).to_contain_text("match “certificate”")
    choice = page.get_by_test_id("picker-task").first
    task_id = choice.get_attribute("data-task-id")
    choice.click()
    expect(page.get_by_test_id("task-input")).to_have_value(task_id)
    expect(page).to_have_url(re.compile(r"/play/new/$"))  # filled in, not followed
    pick_customer(page)
    page.get_by_test_id("start-play").click()

    expect(page).to_have_url(re.compile(r"/play/\d+/$"))
    run = Run.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    assert (run.kind, run.task.task_id, run.user_model) == (Run.Kind.HUMAN, task_id, CUSTOMER)
    assert run.max_steps == 200
    expect(page.get_by_test_id("tool-name")).to_have_value("")  # no tool chosen yet
    expect(page.get_by_test_id("call-tool")).to_be_disabled()
    assert errors == []


def test_typing_in_the_evaluation_form_logs_no_console_error(alices_page):
    page, errors = alices_page, console_errors(alices_page)
    page.goto("/evaluations/new/")
    page.get_by_test_id("model-picker").select_option(AGENT_MODEL)
    page.get_by_label("Name", exact=True).press_sequentially("alice's first evaluation")
    page.get_by_label("Explorer search", exact=True).press_sequentially("flight", delay=50)
    # Changes closer together than the preview's answer: each asks for a new preview
    # while the last is on its way (with hx-sync "replace" each one aborted the last).
    kind = page.get_by_label("Kind", exact=True)
    for value in ("write", "", "write", "read"):
        kind.select_option(value)
    read = Task.objects.filter(
        domain_id="airline", splits__name="test", changes_db=False, search_text__contains="flight"
    ).count()
    assert read
    expect(page.get_by_test_id("preview-tasks")).to_have_text(
        f"{read} task{'s' if read > 1 else ''}"
    )
    assert errors == []


@pytest.mark.parametrize("width", [1400, 400])
def test_the_task_pickers_titles_start_at_the_left_and_stay_readable(alices_page, width):
    page = alices_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/runs/new/?domain=telecom&split=base")
    rows = page.get_by_test_id("picker-task")
    expect(rows.first).to_be_visible()
    for i in range(3):
        row, title = rows.nth(i), rows.nth(i).locator(".picker-title")
        row_box, title_box = row.bounding_box(), title.bounding_box()
        assert title_box["x"] - row_box["x"] < 20, (width, row_box, title_box)
        assert title_box["width"] > 0.8 * (row_box["width"] - 30), (width, row_box, title_box)
        shown = title.inner_text()
        assert len(shown) > 20 and not shown.startswith("You"), shown
        assert title.evaluate("t => t.scrollWidth <= t.clientWidth + 1")  # nothing cut sideways


def test_picking_a_connections_model_shows_the_advice_on_limits_live(
    alices_page, alice, llm_server, connections_cleared
):
    connection = openai_compatible_connection(llm_server, by=alice, owner=alice)
    page = alices_page
    errors = console_errors(page)
    page.goto("/runs/new/")
    advice = page.get_by_test_id("limits-advice")
    expect(advice).to_be_hidden()  # the router's models: τ²'s defaults, no advice

    page.get_by_test_id("model-picker").select_option(f"@{connection.slug}/{CONNECTION_MODEL}")
    expect(advice).to_be_visible()
    expect(advice).to_contain_text("step limit of 30–50")
    expect(page.locator('input[name="max_steps"]')).to_have_value("200")  # advice only

    page.get_by_test_id("model-picker").select_option(AGENT_MODEL)
    expect(advice).to_be_hidden()
    assert errors == []

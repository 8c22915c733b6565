"""alice starts a run from the run form in Chromium: she chooses the domain, picks a task
through the picker, starts it and, once it has ended, runs it again from its page — on the
production path (real ASGI app, channels_redis, a Celery worker process, the scripted LLM).
"""

import re

import pytest
from playwright.sync_api import expect

from apps.runs.models import Run
from tests.support.browser import page_signed_in_as
from tests.support.llm_server import RecordedRequest, text
from tests.support.scripts import AGENT_MODEL, is_agent_request, refresh_agent_models

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(autouse=True)
def agent_models(committed_db, llm_server):
    return refresh_agent_models()


@pytest.fixture
def alices_page(page, alice, base_url):
    return page_signed_in_as(page, alice, base_url)


def short_conversation(request: RecordedRequest):
    """Any task, any number of runs: the agent cannot help, the customer says goodbye."""
    if is_agent_request(request):
        return text("Sorry, I cannot help with that today.")
    if "cannot help" in request.text():
        return text("Alright, bye. ###STOP###")
    return text("Hi, I would like to exchange an item of my order.")


def picker_domains(page) -> set[str]:
    return set(
        page.eval_on_selector_all(
            "[data-testid=picker-task]", "links => links.map((a) => a.dataset.domain)"
        )
    )


def test_alice_picks_a_retail_task_starts_it_and_runs_it_again(
    alices_page, celery_worker, llm_server
):
    page = alices_page
    llm_server.responder = short_conversation
    page.goto("/runs/new/")
    expect(page.get_by_test_id("picker-count")).to_contain_text("airline/test")

    page.get_by_test_id("domain").select_option("retail")
    expect(page.get_by_test_id("picker-count")).to_contain_text("40 tasks in retail/test")
    assert picker_domains(page) == {"retail"}
    page.get_by_test_id("task-input").fill("exchange")
    expect(page.get_by_test_id("picker-count")).to_contain_text("match “exchange”")
    assert picker_domains(page) == {"retail"}
    assert page.get_by_test_id("picker-task").count() >= 2
    choice = page.get_by_test_id("picker-task").nth(1)
    task_id = choice.get_attribute("data-task-id")
    choice.click()
    expect(page.get_by_test_id("task-input")).to_have_value(task_id)
    expect(page).to_have_url(re.compile(r"/runs/new/$"))  # filled in, not followed
    page.get_by_test_id("model-picker").select_option(AGENT_MODEL)
    page.get_by_label("Step limit").fill("20")
    page.get_by_test_id("start-run").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    assert (run.task.domain_id, run.task.task_id, run.max_steps) == ("retail", task_id, 20)
    # "Run again" appears once the run has ended, live; "Retry" is for failed runs.
    expect(page.get_by_test_id("status")).to_have_text("completed", timeout=60_000)
    expect(page.get_by_test_id("run-again")).to_be_visible()
    expect(page.get_by_test_id("retry")).to_be_hidden()
    page.get_by_test_id("run-again").click()

    expect(page).to_have_url(re.compile(rf"/runs/(?!{run.pk}/)\d+/$"))
    again = Run.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    assert (again.task_id, again.max_steps, again.seed) == (run.task_id, 20, run.seed)
    expect(page.get_by_test_id("status")).to_have_text("completed", timeout=60_000)


def test_the_longest_telecom_ids_fit_the_run_form_at_400_px(alices_page):
    page = alices_page
    page.set_viewport_size({"width": 400, "height": 800})
    page.goto("/runs/new/?domain=telecom&split=full")
    tasks = page.get_by_test_id("picker-task")
    expect(tasks).to_have_count(50)
    form = page.get_by_test_id("run-form")
    box = form.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 400
    assert form.evaluate("(f) => f.scrollWidth <= f.clientWidth")
    # Cut on screen, whole in the title and in the field once picked.
    longest = max(
        page.eval_on_selector_all(
            "[data-testid=picker-task]", "links => links.map((a) => a.dataset.taskId)"
        ),
        key=len,
    )
    link = page.locator(f'[data-testid=picker-task][data-task-id="{longest}"]')
    assert link.get_attribute("title").startswith(longest) and len(longest) > 100
    assert link.bounding_box()["width"] <= 400
    link.click()
    expect(page.get_by_test_id("task-input")).to_have_value(longest)

"""alice evaluates a model on the tasks an explorer search shows and watches it fill in, in
Chromium, on the production path (real ASGI app, channels_redis, a Celery worker process,
the scripted LLM)."""

import re

import pytest
from django.test import Client
from playwright.sync_api import expect

from apps.evaluations.models import Evaluation
from tests.support.scripts import AGENT_MODEL, gold_script, refresh_agent_models

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def signed_in_page(page, alice, base_url, llm_server):
    refresh_agent_models()
    client = Client()
    client.force_login(alice)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base_url}]
    )
    return page


def test_alice_evaluates_a_model_from_the_explorer_and_watches_pass_k_drawn(
    signed_in_page, celery_worker, llm_server
):
    page = signed_in_page
    gold_script(llm_server, delay=0.2)  # solves airline/27; on 38 the same moves are wrong

    page.goto("/tasks/?domain=airline&split=train&q=send_certificate")
    evaluate = page.get_by_test_id("evaluate-tasks")
    expect(evaluate).to_have_text("Evaluate a model on these 2 tasks")
    evaluate.click()

    expect(page).to_have_url(re.compile(r"/evaluations/new/\?domain=airline&split=train&q="))
    expect(page.get_by_test_id("preview-tasks")).to_have_text("2 tasks")
    page.get_by_test_id("model-picker").select_option(AGENT_MODEL)
    page.locator("#id_num_trials").fill("2")
    # The preview follows the form: 2 tasks × 2 trials, priced at novita's prices.
    expect(page.get_by_test_id("preview-runs")).to_have_text("4")
    expect(page.get_by_test_id("preview-cost")).to_contain_text("Estimated cost: $")
    page.get_by_test_id("start-evaluation").click()

    expect(page).to_have_url(re.compile(r"/evaluations/\d+/$"))
    evaluation = Evaluation.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    assert evaluation.task_ids == ["27", "38"] and evaluation.num_trials == 2
    page.evaluate("() => { window.stillTheSamePage = true; }")
    cells = page.get_by_test_id("matrix").get_by_test_id("cell")
    expect(cells).to_have_count(4)

    # The runs finish on the worker; the page fills in over the WebSocket.
    expect(page.get_by_test_id("evaluation-status")).to_have_text("completed", timeout=120_000)
    passed = page.locator('[data-testid="cell"].c-pass')
    expect(passed).to_have_count(2)
    expect(passed.first).to_have_text("1.00")
    # Compared as sets: sorted as text, /runs/10/ comes before /runs/9/.
    run_ids = evaluation.runs.filter(task__task_id="27").values_list("id", flat=True)
    hrefs = passed.evaluate_all("cells => cells.map(c => c.getAttribute('href'))")
    assert len(hrefs) == 2 and set(hrefs) == {f"/runs/{run_id}/" for run_id in run_ids}
    assert page.evaluate("() => window.stillTheSamePage") is True  # no reload: live

    # τ²'s pass^k: task 27 2/2, task 38 0/2 → pass^1 = pass^2 = 0.5, drawn on the canvas.
    expect(page.get_by_test_id("pass-1")).to_contain_text("0.500")
    points = page.evaluate("() => window.tau2Evaluation.passChart.data.datasets[0].data")
    assert points == [0.5, 0.5]
    canvas = page.get_by_test_id("pass-k-chart")
    assert canvas.evaluate("c => c.width > 0 && c.height > 0")
    bars = page.evaluate("() => window.tau2Evaluation.rewardChart.data.labels")
    assert bars == ["27", "38"]
    evaluation.refresh_from_db()
    assert evaluation.status == Evaluation.Status.COMPLETED


def test_a_form_changed_before_its_scripts_loaded_still_gets_its_preview(signed_in_page):
    """On a slow load alice can pick a model and a k before htmx listens; the preview
    must still say what she chose, not what the server first rendered."""
    page = signed_in_page
    held = []
    page.route("**/htmx-*.js", lambda route: held.append(route))  # held until the form changed
    page.goto(
        "/evaluations/new/?domain=airline&split=train&q=send_certificate", wait_until="commit"
    )
    page.get_by_test_id("model-picker").select_option(AGENT_MODEL)
    page.locator("#id_num_trials").fill("2")
    for _ in range(200):
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the page never asked for htmx"
    expect(page.get_by_test_id("preview-runs")).to_have_text("8")  # as rendered: k = 4
    held[0].continue_()
    expect(page.get_by_test_id("preview-runs")).to_have_text("4")
    expect(page.get_by_test_id("preview-cost")).to_contain_text("Estimated cost: $")

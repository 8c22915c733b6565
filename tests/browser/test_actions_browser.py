"""The generic actions of static/js/actions.js in Chromium: a form with ``data-confirm``
asks before it is submitted (and submits nothing when declined); a ``data-copy`` button
copies its element's value or text and says "Copied".

alice owns a running evaluation with runs left to do.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tests.support.evaluations import stored_evaluation
from tests.support.people import browser_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def running_evaluation(alice):
    """alice's evaluation of 3 tasks × 2 trials: 1 completed, 2 running, 3 queued."""
    evaluation = stored_evaluation(
        alice, outcomes={"0": [1.0, 0.0], "1": [1.0, 1.0], "2": [0.0, 1.0]}, status="running"
    )
    runs = list(Run.objects.filter(evaluation=evaluation).order_by("pk"))
    for run in runs[1:3]:
        run.status, run.reward, run.finished_at = Run.Status.RUNNING, None, None
        run.save(update_fields=["status", "reward", "finished_at"])
    for run in runs[3:]:
        run.status, run.reward, run.finished_at = Run.Status.QUEUED, None, None
        run.save(update_fields=["status", "reward", "finished_at"])
    Evaluation.objects.filter(pk=evaluation.pk).update(finished_at=None)
    return evaluation


def test_stopping_an_evaluation_asks_first_and_says_how_many_runs_it_stops(
    page, alice, base_url, running_evaluation
):
    browser_signed_in(page, alice, base_url)
    page.goto(f"/evaluations/{running_evaluation.pk}/")
    asked: list[str] = []

    def decline(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", decline)
    page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("evaluation-status")).to_have_text("running")
    assert len(asked) == 1
    assert "Stop this evaluation? 5 unfinished runs stop (2 running, 3 queued)" in asked[0]
    running_evaluation.refresh_from_db()
    assert running_evaluation.status == Evaluation.Status.RUNNING
    assert Run.objects.filter(evaluation=running_evaluation, status=Run.Status.STOPPED).count() == 0

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("evaluation-status")).to_have_text("stopped")
    running_evaluation.refresh_from_db()
    assert running_evaluation.status == Evaluation.Status.STOPPED
    # The queued ones are stopped at once; the running ones between their hops, on a worker.
    assert Run.objects.filter(evaluation=running_evaluation, status=Run.Status.STOPPED).count() >= 3


COPY_TARGETS = """
const key = document.createElement("input");
key.id = "a-key"; key.value = "tau2_sk_under_score_0123";
const snippet = document.createElement("pre");
snippet.id = "a-snippet"; snippet.textContent = "  curl -H 'Authorization: Bearer x' /api/  ";
for (const [target, id] of [["#a-key", "copy-key"], ["#a-snippet", "copy-snippet"]]) {
  const button = document.createElement("button");
  button.type = "button"; button.dataset.copy = target; button.textContent = "Copy";
  button.dataset.testid = id;
  document.querySelector("main").append(button);
}
document.querySelector("main").append(key, snippet);
"""


def test_a_copy_button_copies_a_fields_value_or_an_elements_text_and_says_copied(
    page, base_url, context
):
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
    page.goto("/tasks/")
    page.evaluate(COPY_TARGETS)  # added after load: the listener is the document's

    page.get_by_test_id("copy-key").click()
    expect(page.get_by_test_id("copy-key")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "tau2_sk_under_score_0123"

    page.get_by_test_id("copy-snippet").click()
    expect(page.get_by_test_id("copy-snippet")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == (
        "curl -H 'Authorization: Bearer x' /api/"
    )
    # and it says so for a moment only
    expect(page.get_by_test_id("copy-key")).to_have_text("Copy", timeout=5000)


HTMX_FORM = """
const form = document.createElement("form");
form.setAttribute("hx-post", "/runs/htmx-confirm-probe/");
form.setAttribute("hx-swap", "none");
form.dataset.confirm = "Delete this label?";
const button = document.createElement("button");
button.type = "submit"; button.textContent = "Delete"; button.dataset.testid = "delete-label";
form.append(button);
document.querySelector("main").append(form);
htmx.process(form);
"""


def test_a_confirmed_htmx_form_is_sent_only_when_the_person_agrees(page, base_url):
    page.goto("/tasks/")
    page.wait_for_function("window.htmx !== undefined")
    page.evaluate(HTMX_FORM)
    sent: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if "htmx-confirm-probe" in r.url else None)

    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_test_id("delete-label").click()
    page.wait_for_timeout(500)  # what htmx would have sent by now
    assert sent == []

    asked: list[str] = []

    def agree(dialog):
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", agree)
    with page.expect_request("**/runs/htmx-confirm-probe/"):
        page.get_by_test_id("delete-label").click()
    assert asked == ["Delete this label?"]
    assert len(sent) == 1  # the declined click sent nothing, even later

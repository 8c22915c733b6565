"""The Content-Security-Policy holds on the main pages in Chromium: no violation is
reported (no inline script, no <style> element, no eval, no connection elsewhere), and
what the policy must allow still works — htmx's search, the run page's WebSocket, the
evaluation's Chart.js chart, the API docs.

alice is signed in and owns a running run, a play session and an evaluation.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tests.support.evaluations import stored_evaluation
from tests.support.people import browser_signed_in

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Records every violation the page reports, from before its first script runs.
LISTEN = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


@pytest.fixture
def watched_page(page, alice, base_url):
    browser_signed_in(page, alice, base_url)
    page.add_init_script(LISTEN)
    refused: list[str] = []
    page.on(
        "console",
        lambda m: refused.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.refused = refused
    return page


@pytest.fixture
def alices_work(alice):
    task = Task.objects.get(domain_id="airline", task_id="27")
    common = {"task": task, "domain": "airline", "created_by": alice, "user_model": "u/m"}
    run = Run.objects.create(
        **common, agent_model="org/model-a", status=Run.Status.RUNNING, n_messages=2
    )
    for seq, (role, line) in enumerate([("assistant", "Hi! How can I help?"), ("user", "Hi")]):
        RunEvent.objects.create(
            run=run,
            seq=seq,
            kind="agent" if role == "assistant" else "customer",
            message={"role": role, "content": line},
        )
    play = Run.objects.create(
        **common,
        kind=Run.Kind.HUMAN,
        agent_model="human",
        status=Run.Status.RUNNING,
        play_phase=Run.PlayPhase.YOUR_TURN,
    )
    evaluation = stored_evaluation(alice, outcomes={"0": [1.0, 0.0], "1": [1.0, 1.0]})
    return {"run": run, "play": play, "evaluation": evaluation}


def _violations(page) -> list[str]:
    return [*page.evaluate("window.__csp"), *page.refused]


def test_the_main_pages_report_no_csp_violation(watched_page, alices_work):
    page = watched_page
    run, play, evaluation = alices_work["run"], alices_work["play"], alices_work["evaluation"]
    for path in (
        "/tasks/",
        "/tasks/airline/",
        "/tasks/airline/27/",
        "/runs/",
        "/runs/new/",
        f"/runs/{run.pk}/",
        "/play/",
        f"/play/{play.pk}/",
        "/evaluations/",
        "/evaluations/new/",
        f"/evaluations/{evaluation.pk}/",
        "/leaderboard/",
        "/models/",
        "/accounts/sign-in/",
    ):
        response = page.goto(path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"], path
        page.wait_for_load_state("networkidle")
        assert _violations(page) == [], path

    # htmx still works: the explorer's search updates the results in place.
    page.goto("/tasks/")
    page.locator("#q").fill("baggage")
    expect(page).to_have_url("/tasks/?domain=airline&split=test&q=baggage", timeout=10_000)
    # The run page's WebSocket (ws:// to the page's own host) connects and gets events.
    with page.expect_websocket() as socket:
        page.goto(f"/runs/{run.pk}/")
    assert f"/ws/runs/{run.pk}/" in socket.value.url
    socket.value.wait_for_event("framereceived", timeout=10_000)
    # Chart.js draws the evaluation's chart.
    page.goto(f"/evaluations/{evaluation.pk}/")
    page.wait_for_load_state("networkidle")
    assert page.locator("canvas").count() >= 1
    # The API docs (Swagger UI, its script served as a file) render.
    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info")).to_be_visible(timeout=15_000)
    assert _violations(page) == []

    # And the listening works: a <style> element (what htmx would add) is refused.
    page.evaluate("document.head.insertAdjacentHTML('beforeend', '<style>b{}</style>')")
    page.wait_for_function("window.__csp.length > 0")
    assert any("style-src" in v for v in _violations(page))

"""alice watches her run's page in Chromium while the last worker dies and another starts:
the banner "No worker has been alive since HH:MM — runs wait." comes within 30 s and goes
once a worker beats again, without a reload. Production's timings (a beat every 5 s, alive
for 15 s, the page asking every 10 s), a real worker process."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from playwright.sync_api import expect

from tests.support import processes
from tests.support.people import browser_signed_in
from tests.support.scripts import queued_run
from tests.workers.conftest import beat_row, own_queue, start_worker  # noqa: F401 - a fixture

pytestmark = [pytest.mark.browser, pytest.mark.slow]

GONE = re.compile(r"^No worker has been alive since \d\d:\d\d — runs wait\.$")


def test_the_banner_comes_within_30_s_of_the_last_worker_going_and_clears_when_one_returns(
    page,
    alice,
    base_url,
    own_queue,  # noqa: F811 - the fixture imported above
    scripted_llm_session,
):
    run = queued_run(alice)
    worker = start_worker(scripted_llm_session, queue=own_queue, name="banner")
    try:
        browser_signed_in(page, alice, base_url)
        page.goto(f"/runs/{run.pk}/")
        banner = page.get_by_test_id("worker-banner")
        expect(banner).to_be_hidden()
        page.evaluate("window.sameDocument = true")

        os.kill(worker.pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
        killed = time.monotonic()
        expect(banner).to_be_visible(timeout=30_000)
        appeared = time.monotonic() - killed
        expect(banner).to_have_text(GONE)
    finally:
        processes.stop(worker)

    again = start_worker(scripted_llm_session, queue=own_queue, name="banner")
    try:
        ready = time.monotonic()
        expect(banner).to_be_hidden(timeout=20_000)
        cleared = time.monotonic() - ready
    finally:
        processes.stop(again)

    assert page.evaluate("window.sameDocument") is True  # no reload
    print(f"banner: shown {appeared:.1f} s after the kill, gone {cleared:.1f} s after ready")


def test_a_503_that_is_not_about_workers_leaves_the_banner_as_it_is(
    page,
    alice,
    base_url,
    own_queue,  # noqa: F811 - the fixture imported above
):
    """While the database restarts /health/workers answers the site's 503 ``{"detail"}``:
    it says nothing about the workers, so the banner stays; a real answer still counts."""
    beat_row(queue=own_queue, hostname="up@host")  # alive as the page is rendered
    database_away = {"detail": "The database is unavailable for a moment; try again soon."}
    none_alive = {
        "alive": False,
        "since": None,
        "workers": 0,
        "message": "No worker is alive — runs wait.",
    }
    replies = iter([database_away])  # then none_alive, for every later poll
    page.route(
        "**/health/workers",
        lambda route: route.fulfill(status=503, json=next(replies, none_alive)),
    )
    run = queued_run(alice)
    browser_signed_in(page, alice, base_url)
    page.goto(f"/runs/{run.pk}/")
    banner = page.get_by_test_id("worker-banner")
    expect(banner).to_be_hidden()

    with page.expect_response("**/health/workers", timeout=20_000):
        pass  # the first poll: the database's 503
    expect(banner).to_be_hidden()
    with page.expect_response("**/health/workers", timeout=20_000):
        pass  # the next: no worker alive
    expect(banner).to_have_text("No worker is alive — runs wait.")
    expect(banner).to_be_visible()

"""alice forks her finished run at the agent's answer after the write and hands it to the
same model with another seed, in Chromium, on the production path (real ASGI app, a
Celery worker process, the scripted LLM)."""

import re

import pytest
from playwright.sync_api import expect

from apps.runs.models import Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.runs.conftest import AGENT_MODEL, agent_models, finished, gold_script, wait_for  # noqa: F401
from tests.support.browser import page_signed_in_as
from tests.support.run_page import run_body_html, wait_until_ended_live
from tests.support.scripts import GOLD_CLOSING_SEQ

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# The agent's closing answer: after the write (the $150 certificate) on τ² 0.2, after the
# lookup on 1.x (its task 27 owes no certificate; the answer says so).
AFTER_THE_WRITE = GOLD_CLOSING_SEQ


def test_alice_forks_her_run_here_and_the_fork_page_shows_its_lineage(
    page, alice, base_url, celery_worker, llm_server
):
    gold_script(llm_server)
    task = Task.objects.get(domain_id="airline", task_id="27")
    parent = run_create(
        user=alice, task=task, spec=RunSpec(agent=Side(AGENT_MODEL), max_steps=30, seed=7)
    )
    parent = wait_for(parent, finished, what="the parent run")
    assert parent.reward == 1.0, parent.error
    page = page_signed_in_as(page, alice, base_url)

    page.goto(f"/runs/{parent.pk}/")
    # "Fork here" is in the message's menu.
    message = page.locator(f"#message-{AFTER_THE_WRITE}")
    message.get_by_test_id("message-actions").click()
    message.get_by_test_id("fork-here").click()
    expect(page.get_by_test_id("fork-point")).to_contain_text("certificate")
    page.get_by_label("the same agent model, another seed").check()
    page.get_by_label("Seed", exact=True).fill("11")
    page.get_by_test_id("start-fork").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    child = Run.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    assert (child.parent_id, child.fork_seq) == (parent.pk, AFTER_THE_WRITE)
    expect(page.get_by_test_id("fork-parent")).to_contain_text(
        f"forked from run {parent.pk} at message {AFTER_THE_WRITE}"
    )
    expect(page.get_by_test_id("reward")).to_have_text("1.00", timeout=90_000)
    wait_until_ended_live(page)
    child = wait_for(child, finished, what="the fork")
    # The prefix is there as it was, each message marked as the parent's; the fork's own
    # messages follow, unmarked.
    events = page.get_by_test_id("conversation").get_by_test_id("event")
    expect(events).to_have_count(child.events.count())
    assert child.events.count() > AFTER_THE_WRITE
    inherited = page.locator(".event-inherited")
    expect(inherited).to_have_count(AFTER_THE_WRITE)
    expect(inherited.last).to_have_attribute("data-seq", str(AFTER_THE_WRITE - 1))
    expect(inherited.first.get_by_test_id("inherited")).to_have_text(f"inherited from #{parent.pk}")
    expect(page.locator(f"#message-{AFTER_THE_WRITE}").get_by_test_id("inherited")).to_have_count(0)
    expect(page.get_by_test_id("seed")).to_have_text(f"seed 11 (trial 0 → {child.seed})")
    # What the page shows live is what a reload shows.
    live = run_body_html(page)
    page.reload()
    expect(page.get_by_test_id("reward")).to_have_text("1.00")
    assert run_body_html(page) == live

    page.get_by_test_id("fork-parent").get_by_role("link").click()
    expect(page.get_by_test_id("fork-child")).to_contain_text(f"fork {child.pk}")

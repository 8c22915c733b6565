"""Pages hold at 400 px and at 1,400 px wide with τ²'s longest task id (a telecom one of
~150 characters without a space), in Chromium: nothing widens the page, and alice's
name in the header is readable (not white on the page's white)."""

from __future__ import annotations

import pytest
from django.db.models.functions import Length
from playwright.sync_api import expect

from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tests.support.browser import page_signed_in_as
from tests.support.scripts import refresh_agent_models

pytestmark = [pytest.mark.browser]

WIDTHS = (400, 1400)


@pytest.fixture
def alice_page(page, alice, base_url):
    return page_signed_in_as(page, alice, base_url)


@pytest.fixture
def models(committed_db, llm_server):
    """The model catalogue as the scripted router lists it: the model pickers' long options."""
    return refresh_agent_models()


@pytest.fixture
def longest(committed_db) -> Task:
    return Task.objects.order_by(Length("task_id").desc()).first()


@pytest.fixture
def long_run(alice, longest) -> Run:
    run = Run.objects.create(
        task=longest,
        domain=longest.domain_id,
        created_by=alice,
        agent_model="deepseek-ai/DeepSeek-V4.1-Flash:novita",
        user_model="deepseek-ai/DeepSeek-V4.1-Flash",
        status=Run.Status.COMPLETED,
        reward=1.0,
        reward_info={"reward": 1.0, "db_check": {"db_match": True}},
        termination_reason="user_stop",
        n_messages=3,
    )
    lines = [
        ("agent", {"role": "assistant", "content": f"About {longest.task_id}: how can I help?"}),
        ("customer", {"role": "user", "content": "My phone says " + "x" * 200}),
        ("customer", {"role": "user", "content": "###STOP###"}),
    ]
    for seq, (kind, message) in enumerate(lines):
        RunEvent.objects.create(run=run, seq=seq, kind=kind, message=message)
    return run


@pytest.fixture
def long_session(alice, longest) -> Run:
    """alice's open play session of the longest task."""
    run = Run.objects.create(
        kind=Run.Kind.HUMAN,
        task=longest,
        domain=longest.domain_id,
        created_by=alice,
        agent_model="a person",
        user_model="deepseek-ai/DeepSeek-V4.1-Flash",
        status=Run.Status.RUNNING,
        play_phase=Run.PlayPhase.YOUR_TURN,
        n_messages=1,
    )
    RunEvent.objects.create(
        run=run, seq=0, kind="agent", message={"role": "assistant", "content": "Hi!"}
    )
    return run


def holds(page, width: int) -> None:
    """The page is no wider than the window and alice's name is readable."""
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"{page.url} is {scroll} px wide at {width} px"
    name = page.get_by_test_id("username")
    expect(name).to_be_visible()
    colours = name.evaluate(
        """(el) => {
          const clear = (node) => getComputedStyle(node).backgroundColor === "rgba(0, 0, 0, 0)";
          let bg = el;
          const colour = getComputedStyle(el).color;
          while (bg && clear(bg)) bg = bg.parentElement;
          const box = el.getBoundingClientRect();
          const header = el.closest("header").getBoundingClientRect();
          return {colour, background: bg ? getComputedStyle(bg).backgroundColor : "none",
                  inside: box.right <= header.right + 0.5 && box.bottom <= header.bottom + 0.5};
        }"""
    )
    assert colours["colour"] != colours["background"], colours
    assert colours["inside"], f"the name is outside the header's background at {width} px"


@pytest.fixture
def long_key(alice):
    """alice's API key with the longest name a key may have, without a space."""
    from apps.agents.services import api_key_create

    return api_key_create(user=alice, name="k" * 100)[0]


@pytest.fixture
def long_race(alice, longest, long_run, long_session):
    """A race of the longest task whose lanes are the long run and the play session."""
    from apps.races.models import Race, RaceLane

    race = Race.objects.create(
        created_by=alice, task=longest, user_model=long_run.user_model, seed=300
    )
    for position, run in enumerate((long_run, long_session)):
        RaceLane.objects.create(race=race, run=run, position=position)
    return race


@pytest.mark.parametrize("width", WIDTHS)
def test_pages_hold_with_the_longest_task_id(
    alice_page, models, longest, long_run, long_session, long_key, long_race, width
):
    page = alice_page
    page.set_viewport_size({"width": width, "height": 900})
    assert len(longest.task_id) > 100 and longest.domain_id == "telecom"
    pages = [
        f"/tasks/?domain=telecom&split=full&q={longest.task_id[:40]}",
        longest.get_absolute_url(),
        "/runs/",
        long_run.get_absolute_url(),
        "/play/",
        long_session.get_absolute_url().replace("/runs/", "/play/"),
        f"/tasks/{longest.domain_id}/",
        f"/runs/compare/?ids={long_run.pk},{long_session.pk}",
        f"/runs/new/?domain={longest.domain_id}&task={longest.task_id}",
        "/evaluations/",
        "/evaluations/new/",
        "/leaderboard/",
        "/models/",
        "/accounts/keys/",
        "/agents/",
        "/agents/playground/",
        "/races/",
        f"/races/new/?domain={longest.domain_id}&task={longest.task_id}",
        long_race.get_absolute_url(),
    ]
    for path in pages:
        response = page.goto(path)
        assert response.ok, f"{path}: {response.status}"
        holds(page, width)
    page.goto(long_run.get_absolute_url())
    marker = page.get_by_test_id("stop-marker")
    expect(marker).to_contain_text("The customer ended the conversation")
    expect(page.get_by_test_id("conversation")).not_to_contain_text("STOP")
    expect(page.locator('nav[aria-label="Main"] a[aria-current="page"]')).to_have_text("Runs")
    expect(page.get_by_test_id("nav-policy")).to_have_attribute("href", "/tasks/telecom/")

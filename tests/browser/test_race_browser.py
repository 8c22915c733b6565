"""alice starts a race of three scripted models in Chromium and watches the lanes fill live
to their rewards, on the production path (real ASGI app, channels_redis, a Celery worker
process, the scripted LLM answering each model its own way)."""

import re

import pytest
from playwright.sync_api import expect

from apps.races.models import Race
from tests.support.browser import page_signed_in_as
from tests.support.races import CUSTOMER, EXTRA, FAST, WRONG, race_script
from tests.support.scripts import GOLD_CERTIFICATE, refresh_agent_models

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _widths(page) -> dict:
    return page.evaluate(
        """() => {
          const wrap = document.querySelector('[data-testid="compare-scroll"]');
          return {page: document.documentElement.scrollWidth, window: window.innerWidth,
                  inner: wrap.scrollWidth, wrap: wrap.clientWidth};
        }"""
    )


def test_alice_races_three_models_and_watches_the_lanes_fill_live(
    page, alice, base_url, celery_worker, llm_server
):
    refresh_agent_models()
    race_script(llm_server, slower=2.0)
    problems = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page = page_signed_in_as(page, alice, base_url)

    page.goto("/runs/")
    page.get_by_test_id("races-link").click()
    page.get_by_test_id("new-race").click()
    expect(page).to_have_url(re.compile(r"/races/new/$"))
    page.locator("#id_domain").select_option("airline")
    page.locator("#id_task_id").fill("27")
    for lane, model in enumerate((FAST, EXTRA, WRONG), 1):
        page.locator(f"#id_agent_model_{lane}").select_option(model)
    page.locator("#id_user_model").select_option(CUSTOMER)
    page.locator("#id_seed").fill("11")
    page.get_by_test_id("start-race").click()

    expect(page).to_have_url(re.compile(r"/races/\d+/$"))
    race = Race.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    lanes = page.get_by_test_id("race-lane")
    expect(lanes).to_have_count(3)
    expect(page.get_by_test_id("race-seed")).to_have_text("seed 11")
    # Live: a lane is seen running, and tool calls appear in the lanes before the end.
    expect(page.locator('[data-testid="race-lane"][data-status="running"]').first).to_be_visible(
        timeout=30_000
    )
    expect(page.get_by_test_id("race-live-indicator")).to_have_text("Live…")
    expect(page.get_by_test_id("aligned-call").first).to_be_visible(timeout=30_000)
    assert page.locator('[data-testid="race-lane"][data-place]').count() < 3

    # To the end: three rewards, finish order, the extra read a row with gaps elsewhere.
    expect(page.locator('[data-testid="race-lane"][data-place]')).to_have_count(3, timeout=90_000)
    expect(page.get_by_test_id("race-live-indicator")).to_have_text("")
    runs = {lane.run.agent_model: lane.run for lane in race.lanes.select_related("run")}
    outcomes = {FAST: (1, "1.00"), EXTRA: (2, "1.00"), WRONG: (3, "0.00")}
    for model, (place, reward) in outcomes.items():
        row = page.locator(f'[data-testid="race-lane"][data-run-id="{runs[model].pk}"]')
        expect(row.get_by_test_id("race-place")).to_contain_text(str(place))
        expect(row.get_by_test_id("race-reward")).to_have_text(reward)
        expect(row.get_by_test_id("race-cost")).not_to_have_text("no calls yet")
    differs = page.locator('[data-testid="aligned-arg"][data-arg="amount"][data-differs="true"]')
    if GOLD_CERTIFICATE:  # 0.2: all three send the expected certificate, amounts marked
        expect(page.get_by_test_id("aligned-gap")).to_have_count(2)
        expect(differs).to_have_count(3)
    else:  # 1.x owes none: WRONG's certificate is a row of its own, gaps in the others
        expect(page.get_by_test_id("aligned-gap")).to_have_count(4)
        expect(
            page.locator('[data-testid="aligned-call"][data-name="send_certificate"]')
        ).to_have_count(1)
    assert int(page.get_by_test_id("race").get_attribute("data-refreshes")) >= 3
    assert not problems, problems

    # Reopened later, it holds at 400 px (the lanes scroll inside their wrapper) and 1,400 px.
    page.goto("/races/")
    page.locator(f'[data-race-id="{race.pk}"] a').first.click()
    expect(page.get_by_test_id("race-lane")).to_have_count(3)
    page.set_viewport_size({"width": 400, "height": 900})
    widths = _widths(page)
    assert widths["page"] <= widths["window"], widths
    assert widths["inner"] > widths["wrap"], widths
    page.set_viewport_size({"width": 1400, "height": 900})
    widths = _widths(page)
    assert widths["page"] <= widths["window"], widths

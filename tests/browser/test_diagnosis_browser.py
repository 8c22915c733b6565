"""A failed run's diagnosis in Chromium, at 400 px and 1,400 px: the wrong field of its
database, the first divergent write, badges on its tool calls, and no page wider than
the window. The run is played by the engine in-process (scripted customer) and stored
as the runner stores one."""

from __future__ import annotations

import pytest
from django.test import Client
from playwright.sync_api import expect

from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tau2_env import llm
from tau2_env.engine import Episode, messages_to_json
from tests.support.llm_server import text

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER = "ethan_martin_2396"


@pytest.fixture
def failed_run(alice, llm_server) -> Run:
    """alice's run of airline/27 that sent a $149 certificate instead of $150."""
    llm_server.add(text(f"My flight was delayed; I'm {USER}."))
    route = llm.Route(
        provider="hf", model="scripted/customer", base_url=llm_server.base_url, api_key="hf_x7"
    )
    episode = Episode(domain="airline", task_id="27", user_llm=route)
    episode.start()
    episode.call_tool("get_user_details", {"user_id": USER})
    episode.call_tool("send_certificate", {"user_id": USER, "amount": 149})
    episode.finish()
    messages = messages_to_json(episode.messages)
    run = Run.objects.create(
        task=Task.objects.get(domain_id="airline", task_id="27"),
        domain="airline",
        created_by=alice,
        agent_model="org/model-a",
        user_model="u/m",
        status=Run.Status.COMPLETED,
        termination_reason=episode.termination_reason.value,
        reward=episode.reward,
        reward_info=episode.reward_info.model_dump(mode="json"),
        n_messages=len(messages),
    )
    kinds = {"assistant": "agent", "user": "customer", "tool": "tool_result"}
    for seq, message in enumerate(messages):
        RunEvent.objects.create(run=run, seq=seq, kind=kinds[message["role"]], message=message)
    return run


@pytest.mark.parametrize("width", [400, 1400])
def test_the_diagnosis_shows_the_wrong_field_and_holds_at_any_width(
    page, alice, base_url, failed_run, width
):
    client = Client()
    client.force_login(alice)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base_url}]
    )
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/runs/{failed_run.pk}/")

    panel = page.get_by_test_id("diagnosis")
    expect(panel).to_be_visible()
    change = panel.get_by_test_id("db-change")
    expect(change).to_have_count(1)
    expect(change).to_contain_text(".amount")
    expect(change).to_contain_text("150")
    expect(change).to_contain_text("149")
    expect(page.get_by_test_id("first-divergent")).to_contain_text("send_certificate")
    badges = page.get_by_test_id("conversation").get_by_test_id("trace-badge")
    expect(badges).to_have_count(2)
    expect(badges.nth(1)).to_have_text("write with different arguments")
    expect(badges.nth(1)).to_be_visible()
    scroll = page.evaluate("document.documentElement.scrollWidth")
    assert scroll <= width, f"the run page is {scroll} px wide at {width} px"

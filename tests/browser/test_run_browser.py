"""alice runs a model from the task page and watches it to the reward, in Chromium, on the
production path (real ASGI app, channels_redis, a Celery worker process, the scripted LLM)."""

import re

import pytest
from django.test import Client
from playwright.sync_api import expect

from apps.runs.models import Run
from tests.runs.conftest import agent_models, gold_script  # noqa: F401
from tests.support.scripts import GOLD_CALLS

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def signed_in_page(page, alice, base_url):  # noqa: F811
    client = Client()
    client.force_login(alice)
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": base_url}]
    )
    return page


def test_alice_runs_a_model_from_the_task_page_to_the_reward(
    signed_in_page, celery_worker, llm_server
):
    page = signed_in_page
    gold_script(llm_server, delay=0.3)

    page.goto("/tasks/airline/27/")
    page.get_by_test_id("run-model").click()
    expect(page).to_have_url(re.compile(r"/runs/new/\?domain=airline&task=27"))
    page.get_by_test_id("model-picker").select_option("deepseek-ai/DeepSeek-V4.1-Flash:novita")
    page.get_by_test_id("start-run").click()

    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run = Run.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    conversation = page.get_by_test_id("conversation")
    # Events arrive over the WebSocket while the run goes on.
    expect(conversation.get_by_test_id("event").first).to_be_visible(timeout=30_000)
    expect(
        # The gold conversation's last call: the certificate on τ² 0.2, the lookup on 1.x.
        conversation.get_by_test_id("tool-call").filter(has_text=GOLD_CALLS[-1][0])
    ).to_be_visible(timeout=60_000)
    expect(page.get_by_test_id("reward")).to_have_text("1.00", timeout=60_000)
    expect(page.get_by_test_id("status")).to_have_text("completed")
    expect(page.get_by_test_id("result")).to_contain_text("The final database matches")
    run.refresh_from_db()
    assert conversation.get_by_test_id("event").count() == run.events.count()

    # The history lists it, and its JSON downloads.
    page.goto("/runs/")
    row = page.locator(f'[data-testid="run-row"][data-run-id="{run.pk}"]')
    expect(row).to_contain_text("1.00")
    with page.expect_download() as download:
        page.goto(f"/runs/{run.pk}/")
        page.get_by_role("link", name="JSON", exact=True).click()
    assert download.value.suggested_filename == f"run-{run.pk}-studio.json"

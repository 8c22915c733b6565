"""Issue 20's whole path in Chromium, as a staff member walks it: add an OpenAI-compatible
connection, read its models, Test it; evaluate a model on it whose customer is another
connection's model, with τ²'s LLM arguments set; see the agent's reasoning on a run
page; the τ² export carries the arguments. The production path: the real ASGI app,
channels_redis, a Celery worker process, litellm on the wire to the scripted server."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from apps.evaluations.models import Evaluation
from tests.support.browser import page_signed_in_as
from tests.support.connections import (
    CONNECTION_KEY,
    openai_compatible_connection,
    reasoning_effort_sent,
)
from tests.support.llm_server import tool_call, with_reasoning
from tests.support.scripts import gold_script, is_agent_request

pytestmark = [pytest.mark.browser, pytest.mark.slow]

AGENT = "our-finetune-7b"
CUSTOMER = "customer-sim"
CUSTOMER_KEY = "sk-customer-host-5a6b7c8d9e0f"
THOUGHT = "The customer wants compensation; I should look up their profile first."


def _agent_thinks(llm_server) -> None:
    """Airline/27 solved (gold_script), every agent reply with the same reasoning; the
    connection's Test answered with the call it asks for."""
    gold_script(llm_server)
    solve = llm_server.responder

    def responder(request):
        tools = request.body.get("tools") or []
        if tools and not is_agent_request(request):  # the connection's Test: call its tool
            return tool_call(tools[0]["function"]["name"])
        reply = solve(request)
        return with_reasoning(reply, THOUGHT) if is_agent_request(request) else reply

    llm_server.responder = responder


def test_staff_connects_an_endpoint_tests_it_and_evaluates_on_two_connections(
    page, staff, base_url, celery_worker, llm_server
):
    _agent_thinks(llm_server)
    llm_server.catalogue = {"object": "list", "data": [{"id": AGENT}, {"id": "other-7b"}]}
    customers = openai_compatible_connection(
        llm_server, by=staff, name="Customer host", api_key=CUSTOMER_KEY, models=(CUSTOMER,)
    )
    page = page_signed_in_as(page, staff, base_url)

    # The connection, in the browser: the endpoint's models read with the key, then Test.
    page.goto("/connections/")
    page.get_by_test_id("add-team").click()
    page.get_by_test_id("kind").select_option("openai_compatible")
    # The kind's change swaps the base URL field in (its placeholder, required): typed
    # before that answer lands, the URL would be swapped away (a loaded machine's flake).
    expect(page.get_by_test_id("base-url")).to_have_attribute("required", "")
    page.get_by_label("Name", exact=True).fill("Our vLLM")
    page.get_by_test_id("base-url").fill(llm_server.base_url)
    page.get_by_label("API key", exact=True).fill(CONNECTION_KEY)
    page.get_by_test_id("read-models").click()
    expect(page.get_by_test_id("listed-model")).to_have_count(2)
    page.locator(f'[data-testid="listed-model"][value="{AGENT}"]').check()
    page.get_by_test_id("save").click()
    expect(page.locator("h1")).to_have_text("Our vLLM")
    page.get_by_test_id("test").click()
    expect(page.get_by_test_id("test-kind")).to_have_text("works")
    assert CONNECTION_KEY not in page.content()
    slug = re.search(r"@([\w-]+)/", page.content())
    vllm = slug.group(1) if slug else "our-vllm"

    # The evaluation: agent on the new connection, customer on the other, arguments set.
    page.goto("/evaluations/new/?domain=airline&split=test&task_ids=27")
    page.get_by_test_id("model-picker").select_option(f"@{vllm}/{AGENT}")
    page.get_by_test_id("customer-picker").select_option(f"@{customers.slug}/{CUSTOMER}")
    page.locator("#id_num_trials").fill("1")
    page.get_by_test_id("llm-args").locator("summary").click()
    page.locator("#id_agent_temperature").fill("0.3")
    page.locator("#id_agent_reasoning_effort").select_option("high")
    page.locator("#id_agent_extras").fill('{"top_k": 20}')
    page.get_by_test_id("start-evaluation").click()

    expect(page).to_have_url(re.compile(r"/evaluations/\d+/$"))
    evaluation = Evaluation.objects.get(pk=int(page.url.rstrip("/").split("/")[-1]))
    expect(page.get_by_test_id("evaluation-status")).to_have_text("completed", timeout=120_000)
    evaluation.refresh_from_db()
    assert evaluation.agent_llm_args == {
        "temperature": 0.3,
        "reasoning_effort": "high",
        "top_k": 20,
    }
    (run,) = evaluation.runs.all()
    assert run.reward == 1.0, run.error
    # Each side on its own connection's key, with its own arguments on the wire.
    sides = {(is_agent_request(r), r.token) for r in llm_server.chat_requests() if r.token}
    assert sides >= {(True, CONNECTION_KEY), (False, CUSTOMER_KEY)}
    # reasoning_effort as ``tau2 run`` sends it to a model litellm does not know: on τ² 0.2
    # passed on, on 1.x (litellm 1.82.6) dropped (tests/connections/test_faithfulness.py).
    agent_bodies = [r.body for r in llm_server.chat_requests() if is_agent_request(r)]
    assert {(b["temperature"], b.get("reasoning_effort"), b["top_k"]) for b in agent_bodies} == {
        (0.3, reasoning_effort_sent("high"), 20)
    }

    # The run page shows the agent's reasoning, collapsed under its message.
    page.goto(f"/runs/{run.pk}/")
    reasoning = page.get_by_test_id("reasoning").first
    expect(reasoning).to_be_visible()
    expect(reasoning.locator(".reasoning-text")).to_be_hidden()
    reasoning.locator("summary").click()
    expect(reasoning).to_contain_text(THOUGHT)

    # τ²'s results file carries both sides' arguments and litellm's model names.
    exported = page.request.get(f"/evaluations/{evaluation.pk}.json?format=tau2")
    assert exported.ok
    info = json.loads(exported.text())["info"]
    assert info["agent_info"]["llm"] == f"openai/{AGENT}"
    assert info["agent_info"]["llm_args"] == {
        "temperature": 0.3,
        "reasoning_effort": "high",
        "top_k": 20,
    }
    assert info["user_info"]["llm"] == f"openai/{CUSTOMER}"
    assert info["user_info"]["llm_args"] == {"temperature": 0.0}
    assert CONNECTION_KEY not in exported.text() and CUSTOMER_KEY not in exported.text()

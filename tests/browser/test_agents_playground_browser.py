"""The OpenEnv playground in Chromium at 400 px: alice resets airline task 27, calls a read
tool and a write from forms built from their schemas, sees the raw frames, talks to the
customer with respond_to_user and ends with done — the conversation is drawn as it
goes and τ²'s reward with its breakdown at the end, as on a run page. The socket runs
on her own session: no token in the page. dana, signed in with the laptop's developer
sign-in (no Hugging Face token), picks her own endpoint's model as the customer in the
one model picker and plays on that connection's key.

Task 27's gold differs by generation (tests/support/scripts.py): τ² 0.2 expects the $150
certificate, 1.x the lookup alone. On 1.x alice still fills the write's form (its schema,
its required field), but she sends the certificate only where it is owed."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.accounts.services import dev_user_get_or_create
from apps.agents.credentials import install
from tests.support.browser import page_signed_in_as
from tests.support.connections import (
    CONNECTION_KEY,
    CONNECTION_MODEL,
    openai_compatible_connection,
)
from tests.support.llm_server import text
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import GOLD_CERTIFICATE, gold_script

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLOW = 60_000  # a reset builds τ²'s environment and waits for the customer's opening
GOLD_USER = "ethan_martin_2396"


def call(page, tool: str, **fields: str) -> None:
    box = page.get_by_test_id(f"pg-tool-{tool}")
    if box.get_attribute("open") is None:
        box.locator("summary").click()
    for name, value in fields.items():
        box.get_by_label(name, exact=True).fill(value)
    box.get_by_role("button", name=f"Call {tool}").click()


def test_alice_plays_an_episode_by_hand_to_its_reward_at_400_px(page, alice, base_url, llm_server):
    install()
    gold_script(llm_server)
    page.set_viewport_size({"width": 400, "height": 900})
    page_signed_in_as(page, alice, base_url)
    frames = page.get_by_test_id("pg-frames")
    status = page.get_by_test_id("pg-status")

    page.goto("/agents/playground/")
    page.get_by_test_id("pg-domain").select_option("airline")
    page.get_by_test_id("pg-split").select_option("test")
    page.get_by_test_id("pg-task").fill("27")
    page.get_by_test_id("pg-reset").click()
    expect(status).to_contain_text(GOLD_USER, timeout=SLOW)
    expect(page.get_by_test_id("pg-tool-get_user_details")).to_be_visible(timeout=SLOW)
    talk = page.get_by_test_id("pg-conversation")
    expect(talk.locator(".bubble.customer").first).to_contain_text(GOLD_USER)
    expect(frames).to_contain_text('"type": "reset"')
    expect(frames).to_contain_text('"type": "list_tools"')

    sent = frames.locator(".sent").count()
    call(page, "get_user_details")  # its required user_id left empty: nothing is sent
    box = page.get_by_test_id("pg-tool-get_user_details")
    expect(box.get_by_test_id("field-error").first).to_have_text("Required.")
    assert frames.locator(".sent").count() == sent

    call(page, "get_user_details", user_id=GOLD_USER)
    expect(frames.get_by_test_id("pg-frame").first).to_contain_text("Ethan", timeout=SLOW)
    expect(frames).to_contain_text('"tool_name": "get_user_details"')
    expect(status).to_contain_text("get_user_details:")

    calls = 1 + GOLD_CERTIFICATE
    if GOLD_CERTIFICATE:  # τ² 0.2's task 27 owes the $150 certificate; 1.x's none
        call(page, "send_certificate", user_id=GOLD_USER, amount="150")
        expect(frames.get_by_test_id("pg-frame").first).to_contain_text("Certificate", timeout=SLOW)
        expect(frames).to_contain_text('"amount": 150')  # a number, as the schema says
    else:  # the write's form still checks its required field before sending anything
        sent = frames.locator(".sent").count()
        call(page, "send_certificate", amount="150")
        box = page.get_by_test_id("pg-tool-send_certificate")
        expect(box.get_by_test_id("field-error").first).to_have_text("Required.")
        assert frames.locator(".sent").count() == sent

    # Each call is in the conversation as the run page shows one: the call, its result.
    expect(talk.get_by_test_id("pg-tool-call")).to_have_count(calls)
    if GOLD_CERTIFICATE:
        expect(talk.get_by_test_id("pg-tool-call").last).to_contain_text("send_certificate")
        expect(talk.get_by_test_id("pg-tool-result").last).to_contain_text("Certificate")

    call(page, "respond_to_user", message="Is there anything else I can do?")
    expect(status).to_contain_text("respond_to_user: Hi, my flight", timeout=SLOW)
    expect(talk.locator(".bubble.agent").last).to_have_text(
        re.compile("Is there anything else I can do?")
    )
    expect(talk.locator(".bubble.customer").last).to_contain_text("Hi, my flight")

    call(page, "done")
    expect(page.get_by_test_id("pg-reward")).to_have_text(
        re.compile(r"Episode over — reward: 1(\.0)?$"), timeout=SLOW
    )
    # τ²'s verdict broken down as the run page shows it, and τ²'s own messages drawn.
    verdict = page.get_by_test_id("pg-result")
    expect(verdict).to_be_visible()
    expect(verdict.get_by_test_id("pg-reward-value")).to_have_text("1.00")
    expect(verdict.get_by_test_id("pg-breakdown")).to_contain_text("DB 1.00")
    expect(verdict).to_contain_text("The final database matches the expected one.")
    expect(verdict.get_by_test_id("check-met").first).to_be_visible()
    expect(verdict.get_by_test_id("check-unmet")).to_have_count(0)
    expect(talk.get_by_test_id("pg-tool-call")).to_have_count(calls)
    kinds = talk.get_by_test_id("pg-event").evaluate_all("els => els.map(e => e.dataset.kind)")
    assert kinds[:2] == ["agent", "customer"]  # τ²'s greeting, then the customer
    assert kinds.count("tool_result") == calls
    # τ²'s stop words are a line, as on the run page, never text.
    expect(talk.get_by_test_id("stop-marker").first).to_be_visible()
    assert "###STOP###" not in talk.inner_text()
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}
    assert ALICE_TOKEN not in page.content()
    assert page.evaluate("document.documentElement.scrollWidth") <= 400


def test_a_copy_button_copies_its_snippet_as_printed(page, base_url, alice):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base_url)
    page_signed_in_as(page, alice, base_url)
    page.goto("/agents/")

    page.locator('button[data-copy="snippet-mcp-config"]').click()

    expect(page.locator('button[data-copy="snippet-mcp-config"]')).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == page.get_by_test_id("snippet-mcp-config").text_content()
    assert f"{base_url}/agent/mcp?" in copied


def test_dana_without_hugging_face_picks_her_connections_customer(
    page, base_url, llm_server, connections_cleared, monkeypatch
):
    install()
    monkeypatch.setenv("HF_TOKEN", "hf_server_own_token_never_for_dana")  # the server's own
    dana = dev_user_get_or_create(name="dana")
    mine = openai_compatible_connection(llm_server, by=dana, owner=dana, name="Dana's vLLM")
    llm_server.responder = lambda request: text("Hello from my own endpoint.")
    page_signed_in_as(page, dana, base_url)
    status = page.get_by_test_id("pg-status")

    page.goto("/agents/playground/")
    picker = page.get_by_test_id("customer-picker")
    expect(picker).to_be_visible()
    page.get_by_test_id("pg-task").fill("27")
    page.get_by_test_id("pg-reset").click()  # the server's default customer first
    expect(status).to_contain_text("This account has no Hugging Face token", timeout=SLOW)
    expect(status).to_contain_text("choose a customer on one of your connections")
    assert llm_server.chat_requests() == []

    picker.select_option(f"@{mine.slug}/{CONNECTION_MODEL}")
    page.get_by_test_id("pg-reset").click()
    expect(status).to_contain_text(f"customer model Dana's vLLM:{CONNECTION_MODEL}", timeout=SLOW)
    expect(status).to_contain_text("Hello from my own endpoint.")
    expect(page.get_by_test_id("pg-frames")).to_contain_text(
        f'"user_model": "@{mine.slug}/{CONNECTION_MODEL}"'
    )
    expect(page.get_by_test_id("pg-tool-respond_to_user")).to_be_visible(timeout=SLOW)
    assert {r.token for r in llm_server.chat_requests()} == {CONNECTION_KEY}
    assert CONNECTION_KEY not in page.content()

"""Each LLM call told as it happens (issue 33): ``gateway.observe_calls`` hears a call
start and end, with its total time (litellm's retries of it included); the call and its
request are unchanged, and an observer that fails never fails the call."""

from __future__ import annotations

import pytest

from tau2_env.llm import gateway
from tau2_env.llm.llm_args import ROLE_KEY
from tests.support.llm_server import delayed, error, text

MESSAGES = [{"role": "user", "content": "Hi"}]


def _route(llm_server) -> gateway.Route:
    return gateway.Route(
        provider="openai_compatible",
        model="m",
        base_url=llm_server.base_url,
        api_key="sk-test-key-0123456789",
        timeout=30.0,
        label="mine",
    )


def test_a_call_is_told_as_it_waits_and_when_it_answers_with_its_time(llm_server):
    llm_server.responder = lambda request: delayed(text("Hello"), 0.5)
    heard: list[gateway.CallNotice] = []
    with gateway.conversation(user=_route(llm_server)), gateway.observe_calls(heard.append):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert [(n.role, n.phase) for n in heard] == [("user", "waiting"), ("user", "answered")]
    assert heard[0].timeout == 30.0 and heard[1].seconds >= 0.5


def test_a_failed_call_is_told_with_its_time_including_retries(llm_server):
    llm_server.responder = lambda request: error(429, "slow down")
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server)),
        gateway.observe_calls(heard.append),
        pytest.raises(gateway.LLMCallError),
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert [n.phase for n in heard] == ["waiting", "failed"]
    assert len(llm_server.chat_requests()) == gateway.RETRIES + 1  # litellm's retries, as before


def test_an_observer_that_fails_never_fails_the_call_nor_changes_its_request(llm_server):
    llm_server.responder = lambda request: text("Hello")

    def broken(notice: gateway.CallNotice) -> None:
        raise RuntimeError("page gone")

    with gateway.conversation(user=_route(llm_server)):
        plain = gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})
        with gateway.observe_calls(broken):
            observed = gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert observed.choices[0].message.content == plain.choices[0].message.content == "Hello"
    first, second = llm_server.chat_requests()
    assert first.body == second.body

"""The engine in-process: rebuilding a conversation, credentials and retries."""

from __future__ import annotations

import json

import pytest

from tau2_env.engine import catalog
from tau2_env.engine.episodes import Episode, EpisodeOver
from tau2_env.llm import gateway
from tests.support.llm_server import error, text

TOKEN = "hf_engine_token_123456"


def _route(llm_server, token: str = TOKEN) -> gateway.Route:
    return gateway.Route(
        provider="hf", model="org/customer", base_url=llm_server.base_url, api_key=token
    )


def test_a_conversation_rebuilt_from_its_messages_continues_where_it_left_off(llm_server):
    llm_server.add(text("Hi, I want a certificate."), text("My id is noah_muller_9847."))
    first = Episode(domain="airline", task_id="2", user_llm=_route(llm_server))
    first.start()
    first.say("Your user id?")
    first.call_tool("send_certificate", {"user_id": "noah_muller_9847", "amount": 50})
    stored = json.loads(json.dumps(first.messages_json()))  # as a database would keep it

    again = Episode(domain="airline", task_id="2", user_llm=_route(llm_server), messages=stored)

    assert again.environment.get_db_hash() == first.environment.get_db_hash()
    assert [m.model_dump(mode="json") for m in again.messages] == stored
    assert again.step_count == first.step_count and not again.done
    llm_server.add(text("Great, thanks."))
    reply = again.say("I sent you a $50 certificate.")
    assert reply.content == "Great, thanks."
    # The customer's model saw the whole earlier conversation.
    seen = llm_server.chat_requests()[-1].text()
    assert "Your user id?" in seen and "My id is noah_muller_9847." in seen
    assert again.finish() is not None and again.reward_info is not None


def test_a_history_that_does_not_replay_is_refused(llm_server):
    llm_server.add(text("Hi."))
    episode = Episode(domain="airline", task_id="2", user_llm=_route(llm_server))
    episode.start()
    # A write: τ² 1.x replays only the calls that change the database (0.2 every call).
    episode.call_tool("send_certificate", {"user_id": "noah_muller_9847", "amount": 5})
    stored = episode.messages_json()
    stored[-1]["content"] = json.dumps({"user_id": "someone_else"})

    with pytest.raises(ValueError, match="Expected"):
        Episode(domain="airline", task_id="2", user_llm=_route(llm_server), messages=stored)


def test_a_finished_episode_refuses_more_actions_and_keeps_its_score(llm_server):
    llm_server.add(text("Hi."))
    episode = Episode(domain="airline", task_id="2", user_llm=_route(llm_server))
    episode.start()
    info = episode.finish()

    assert episode.done and episode.reward == info.reward
    with pytest.raises(EpisodeOver):
        episode.call_tool("get_user_details", {"user_id": "x"})
    assert episode.finish() is info


def test_a_402_is_not_retried_and_ends_the_episode_with_a_reason(llm_server):
    llm_server.add(text("Hi."), error(402, "no credits"))
    episode = Episode(domain="airline", task_id="2", user_llm=_route(llm_server))
    episode.start()

    assert episode.say("Hello?") is None
    assert episode.done and episode.reward is None
    assert "402" in episode.error and TOKEN not in episode.error
    assert len(llm_server.chat_requests()) == 2


def test_an_llm_call_outside_a_conversation_is_refused(llm_server, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_server_should_not_be_used")
    with pytest.raises(gateway.MissingCredentialsError):
        gateway.routed_completion(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    assert llm_server.chat_requests() == []


def test_the_configured_provider_and_its_server_key_are_used_without_a_token(
    llm_server, monkeypatch
):
    monkeypatch.setenv("TAU2_USER_PROVIDER", "openai")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-server-openai-key-1234")
    route = gateway.resolve_route()
    llm_server.add(text("Hello from the customer."))
    episode = Episode(domain="retail", task_id="0", user_llm=route)

    assert episode.start().content == "Hello from the customer."
    request = llm_server.chat_requests()[0]
    assert request.token == "sk-server-openai-key-1234"
    assert request.body["model"] == "gpt-4.1"
    assert request.body["temperature"] == 0.0
    assert "sk-server" not in repr(route) and "sk-server" not in repr(episode)


def test_a_given_token_wins_over_every_server_key(llm_server, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_999999")
    monkeypatch.setenv("TAU2_USER_MODEL", "org/other-model")
    route = gateway.resolve_route(hf_token="hf_given_token_888888")
    assert route.api_key == "hf_given_token_888888"
    assert route.model == "org/other-model"
    assert route.base_url == llm_server.base_url


def test_no_credentials_explain_what_to_do(llm_server):
    with pytest.raises(gateway.MissingCredentialsError) as failure:
        gateway.resolve_route()
    message = str(failure.value)
    assert "hf_token" in message and "HF_TOKEN" in message and "TAU2_USER_PROVIDER" in message


def test_the_telecom_customer_runs_phone_tools_until_they_speak(llm_server):
    from tests.support.llm_server import tool_call

    task_id = catalog.get_domain("telecom").splits["base"][0]
    llm_server.add(
        text("My phone has no service."),
        tool_call("check_status_bar"),
        tool_call("toggle_airplane_mode"),
        text("I toggled airplane mode."),
    )
    episode = Episode(domain="telecom", task_id=task_id, user_llm=_route(llm_server))
    episode.start()
    reply = episode.say("Please check your status bar and toggle airplane mode.")

    assert reply.content == "I toggled airplane mode."
    phone = [m for m in episode.messages if m.role == "tool" and m.requestor == "user"]
    assert len(phone) == 2 and not any(m.error for m in phone)
    # The customer's model was offered its phone tools.
    assert "toggle_airplane_mode" in llm_server.chat_requests()[1].tool_names

"""The agent faces for a person without a Hugging Face sign-in: everything on a connection.

dana signed in with the laptop's developer sign-in (``dev-dana``: no Hugging Face token in
the vault) and added her own OpenAI-compatible endpoint as a connection. In the OpenEnv
playground (her browser session on ``/ws``) and with her studio key she plays with the
customer on that connection, on its key; a customer left to the server's default would
need her Hugging Face token, so it is refused with the reason — never run on the
server's own key.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect

from apps.agents.services import api_key_create
from apps.runs.models import Run
from tests.support.agents import agent_runs_of
from tests.support.connections import (
    CONNECTION_KEY,
    CONNECTION_MODEL,
    openai_compatible_connection,
)
from tests.support.people import signed_in

SERVER_TOKEN = "hf_server_own_token_never_for_dana"


@pytest.fixture(autouse=True)
def _cleared(connections_cleared):
    """No connection (nor run on one) left over from another test."""


@pytest.fixture
def endpoint(customer, dana):
    """dana's own endpoint: the scripted server, as a personal connection."""
    return openai_compatible_connection(customer, by=dana, owner=dana, name="Dana's vLLM")


@pytest.fixture
def dana_session(dana) -> str:
    return signed_in(dana).cookies["sessionid"].value


async def _reset(asgi_server, headers: dict, **data) -> dict:
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "reset", "data": {"task_id": "27", **data}}))
        return json.loads(await ws.recv())


def _browser(asgi_server, session: str) -> dict:
    return {"Cookie": f"sessionid={session}", "Origin": asgi_server.url}


async def test_dana_plays_in_the_playground_with_her_connections_customer(
    asgi_server, customer, customer_line, endpoint, dana_session
):
    frame = await _reset(
        asgi_server,
        _browser(asgi_server, dana_session),
        user_model=f"@{endpoint.slug}/{CONNECTION_MODEL}",
    )

    assert frame["type"] == "observation", frame
    metadata = frame["data"]["observation"]["metadata"]
    assert metadata["user_message"] == customer_line
    assert metadata["user_model"] == f"Dana's vLLM:{CONNECTION_MODEL}"
    assert {r.token for r in customer.chat_requests()} == {CONNECTION_KEY}
    assert CONNECTION_KEY not in json.dumps(frame)


async def test_the_servers_default_customer_is_refused_for_dana_with_what_to_do(
    asgi_server, customer, endpoint, dana_session, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", SERVER_TOKEN)  # the server has a key of its own

    frame = await _reset(asgi_server, _browser(asgi_server, dana_session))

    assert frame["type"] == "error", frame
    message = frame["data"]["message"]
    assert message.startswith("This account has no Hugging Face token")
    assert "Without it, choose a customer on one of your connections: reset(user_model=" in message
    assert customer.chat_requests() == []  # the server's own key never spent for her


async def test_without_a_server_key_the_default_customer_is_refused_too(
    asgi_server, customer, endpoint, dana_session, monkeypatch
):
    monkeypatch.delenv("HF_TOKEN", raising=False)

    frame = await _reset(asgi_server, _browser(asgi_server, dana_session))

    assert frame["type"] == "error", frame
    assert frame["data"]["message"].startswith("No credentials for the simulated customer")
    assert customer.chat_requests() == []


async def test_a_router_customer_is_refused_for_dana_with_the_vaults_reason(
    asgi_server, customer, endpoint, dana_session
):
    frame = await _reset(
        asgi_server, _browser(asgi_server, dana_session), user_model="Qwen/Qwen3-8B"
    )

    assert frame["type"] == "error", frame
    assert "no Hugging Face token" in frame["data"]["message"]
    assert customer.chat_requests() == []


async def test_danas_studio_key_plays_and_records_with_her_connections_customer(
    asgi_server, customer, customer_line, endpoint, dana, monkeypatch
):
    monkeypatch.setenv("HF_TOKEN", SERVER_TOKEN)
    _, raw = await sync_to_async(api_key_create)(user=dana, name="agent")
    headers = {"Authorization": f"Bearer {raw}"}

    frame = await _reset(asgi_server, headers, user_model=f"@{endpoint.slug}/{CONNECTION_MODEL}")
    refused = await _reset(asgi_server, headers)  # the server's default customer

    assert frame["type"] == "observation", frame
    assert frame["data"]["observation"]["metadata"]["user_message"] == customer_line
    assert {r.token for r in customer.chat_requests()} == {CONNECTION_KEY}
    (run,) = await sync_to_async(agent_runs_of)(dana)  # ended with its session
    assert (run.user_model, run.user_connection_id) == (CONNECTION_MODEL, endpoint.pk)
    assert refused["type"] == "error"
    assert refused["data"]["message"].startswith("This account has no Hugging Face token")
    assert await sync_to_async(Run.objects.filter(created_by=dana).count)() == 1


def test_the_playground_offers_danas_connection_in_the_customer_picker(endpoint, dana):
    page = signed_in(dana).get("/agents/playground/").content.decode()

    assert 'data-testid="customer-picker"' in page
    assert f'value="@{endpoint.slug}/{CONNECTION_MODEL}"' in page
    assert "Dana&#x27;s vLLM" in page
    assert "The customer runs where its model does: a model on a connection on that" in page
    assert "The customer runs on your own Hugging Face credits" not in page

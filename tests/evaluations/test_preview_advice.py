"""The evaluation preview's advice on an unpriced agent model fits where it runs.

alice picks an unpriced model: on Hugging Face's router she is told to pin a priced
provider or choose ``:cheapest``; on her own connection, to enter its prices there (a
link to the connection's form); on a team connection she may not change, to ask who
manages it — never the router's advice for a connection's model.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.support.connections import openai_compatible_connection
from tests.support.scripts import AGENT_MODEL

ROUTER_ADVICE = "Pin a priced provider, or choose <code>:cheapest</code>"


@pytest.fixture(autouse=True)
def _cleared(connections_cleared):
    """No connection (nor run on one) left over from another test."""


def preview(client, agent_model: str) -> str:
    query = {
        "domain": "airline",
        "split": "test",
        "task_ids": "27",
        "agent_model": agent_model,
        "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
        "num_trials": "1",
        "preview": "1",
    }
    return client.get("/evaluations/new/", query).content.decode()


def test_a_router_model_without_a_price_gets_the_routers_advice(alice_client):
    body = preview(alice_client, "Qwen/Qwen3-32B:cerebras")  # the router lists no price

    assert "Estimated cost: <strong>unpriced</strong>" in body
    assert ROUTER_ADVICE in body


def test_a_model_on_alices_own_connection_is_priced_on_the_connection(
    alice_client, alice, llm_server
):
    mine = openai_compatible_connection(
        llm_server, by=alice, owner=alice, name="Alice's vLLM", models=["checkpoint-7"]
    )

    body = preview(alice_client, f"@{mine.slug}/checkpoint-7")

    assert "Estimated cost: <strong>unpriced</strong>" in body
    assert "has no price on the connection Alice&#x27;s vLLM." in body
    assert f'href="/connections/{mine.pk}/edit/" data-testid="preview-price-link"' in body
    assert "so that a budget on it can cap what runs there spend" in body
    assert ROUTER_ADVICE not in body and ":cheapest" not in body


def test_a_team_connection_alice_may_not_change_says_whom_to_ask(alice_client, llm_server, staff):
    team = openai_compatible_connection(
        llm_server,
        by=staff,
        name="Team vLLM",
        models=["checkpoint-7", ("priced-7", (Decimal("1"), Decimal("2")))],
        access="everyone",
    )

    body = preview(alice_client, f"@{team.slug}/checkpoint-7")

    assert "Ask who manages Team vLLM to enter its prices" in body
    assert "preview-price-link" not in body
    assert ROUTER_ADVICE not in body


def test_a_priced_model_on_a_connection_is_estimated(alice_client, alice, llm_server):
    mine = openai_compatible_connection(
        llm_server,
        by=alice,
        owner=alice,
        models=[("priced-7", (Decimal("1"), Decimal("2")))],
    )

    body = preview(alice_client, f"@{mine.slug}/priced-7")

    assert "Estimated cost: <strong>unpriced</strong>" not in body
    assert "billed where it runs (your Hugging Face account, or its connection's key)" in body


def test_the_router_models_preview_keeps_its_estimate(alice_client):
    body = preview(alice_client, AGENT_MODEL)

    assert 'data-testid="preview-cost">Estimated cost:' in body

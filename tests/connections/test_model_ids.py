"""Model ids typed as the endpoints name them: ``org/model``, ``org/model:tag``, dots and
colons, with or without prices (issue 33: ``Qwen/Qwen3-8B`` was refused, its slash read
as the price syntax's)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django import forms

from apps.connections.forms import parse_models
from apps.connections.services import key_hint
from tests.support.connections import openai_compatible_connection
from tests.support.llm_server import tool_call

PRICED = (Decimal("0.20"), Decimal("0.80"))


@pytest.mark.parametrize(
    "model",
    [
        "Qwen/Qwen3-8B",  # vLLM serves a model under its Hub id
        "meta-llama/Llama-3.1-8B-Instruct",
        "tgi",  # TGI answers any name; its own is "tgi"
        "llama3.1:8b",  # Ollama
        "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",  # Ollama, from the Hub
        "acme/checkpoint-7",  # an HF Inference Endpoint's repository
        "gpt-4.1-mini-2025-04-14",
    ],
)
def test_a_typed_id_is_the_whole_first_word_priced_or_not(model):
    assert parse_models(model) == [(model, None)]
    for prices in ("0.20 0.80", "$0.20 / $0.80", "$0.20/$0.80", "0.2\t0.8"):
        assert parse_models(f"{model} {prices}") == [(model, PRICED)], prices


def test_several_lines_and_the_errors_still_said():
    assert parse_models("Qwen/Qwen3-8B 0.2 0.8\n\n  acme/checkpoint-7\n") == [
        ("Qwen/Qwen3-8B", PRICED),
        ("acme/checkpoint-7", None),
    ]
    with pytest.raises(forms.ValidationError, match="Line 1: write the model's name"):
        parse_models("Qwen/Qwen3-8B 0.20")
    with pytest.raises(forms.ValidationError, match="is not a price"):
        parse_models("Qwen/Qwen3-8B cheap / dear")


def test_a_person_types_acme_checkpoint_7_and_it_runs(staff, staff_client, llm_server):
    connection = openai_compatible_connection(llm_server, by=staff)
    form = {
        "name": connection.name,
        "base_url": connection.base_url,
        "api_key": "",
        "models": "acme/checkpoint-7 0.20 0.80\nQwen/Qwen3-8B",
        "access": connection.access,
        "action": "save",
    }
    assert staff_client.post(f"/connections/{connection.pk}/edit/", form).status_code == 302
    assert sorted(connection.models.values_list("name", flat=True)) == [
        "Qwen/Qwen3-8B",
        "acme/checkpoint-7",
    ]

    llm_server.add(tool_call("report_connection_test", status="ok"))
    response = staff_client.post(
        f"/connections/{connection.pk}/test/", {"model": "acme/checkpoint-7"}, follow=True
    )
    assert response.status_code == 200
    (request,) = llm_server.chat_requests()
    assert request.body["model"] == "acme/checkpoint-7"  # as typed, on the wire


def test_a_short_keys_hint_says_so_and_never_shows_it(staff, staff_client, llm_server):
    assert key_hint("sk-long-key-0123456789") == "…6789"
    assert key_hint("abc123") == "short key" and key_hint("") == ""
    connection = openai_compatible_connection(llm_server, by=staff)
    connection.key_hint = key_hint("abc123")
    connection.save(update_fields=["key_hint"])
    page = staff_client.get(f"/connections/{connection.pk}/edit/").content.decode()
    assert "The key is set (" in page and "abc123" not in page

"""Reading the router's ``GET /v1/models`` answer (no database)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from apps.inference.hf_catalogue import CatalogueError, catalogue_parse


def by_name(models):
    return {m.name: m for m in models}


def test_it_keeps_chat_models_with_a_live_provider_that_calls_tools(payload):
    models = by_name(catalogue_parse(payload))

    assert sorted(models) == [
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "deepseek-ai/DeepSeek-V3.1",
        "meta-llama/Llama-3.1-8B-Instruct",
        "openai/gpt-oss-120b",
    ]
    # Dropped: gemma (no provider calls tools), Mistral (its only provider is down),
    # bge-m3 (embeddings) and FLUX (images), although their providers say "tools".


def test_it_keeps_every_provider_of_a_kept_model_with_its_status(payload):
    deepseek = by_name(catalogue_parse(payload))["deepseek-ai/DeepSeek-V3.1"]
    offers = {o.provider: o for o in deepseek.offers}

    assert sorted(offers) == ["fireworks-ai", "hf-inference", "novita", "sambanova", "together"]
    assert [p for p, o in offers.items() if o.usable] == ["novita", "fireworks-ai", "together"]
    assert offers["sambanova"].live is False
    assert offers["hf-inference"].supports_tools is False
    novita = offers["novita"]
    assert (novita.input_price, novita.output_price) == (Decimal("0.27"), Decimal("1.0"))
    assert novita.context_length == 131072
    assert novita.first_token_latency_ms == 1180.0
    assert novita.throughput == 31.5
    assert offers["fireworks-ai"].supports_structured_output is True


def test_a_missing_or_half_price_is_unpriced_not_zero(payload):
    qwen = by_name(catalogue_parse(payload))["Qwen/Qwen3-235B-A22B-Instruct-2507"]
    offers = {o.provider: o for o in qwen.offers}

    assert (offers["cerebras"].input_price, offers["cerebras"].output_price) == (None, None)
    # hyperbolic lists an input price only: no cost can be computed from half a price.
    assert (offers["hyperbolic"].input_price, offers["hyperbolic"].output_price) == (None, None)
    assert offers["nscale"].output_price == Decimal("0.6")


def test_it_skips_malformed_entries_and_prices(payload):
    payload["data"] += [
        "not a model",
        {
            "id": "no-slash",
            "providers": [{"provider": "x", "status": "live", "supports_tools": True}],
        },
        {
            "id": "acme/odd-prices",
            "providers": [
                {
                    "provider": "a",
                    "status": "live",
                    "supports_tools": True,
                    "pricing": {"input": "n/a", "output": 1},
                },
                {
                    "provider": "b",
                    "status": "live",
                    "supports_tools": True,
                    "pricing": {"input": -1, "output": 1},
                },
                {
                    "provider": "c",
                    "status": "live",
                    "supports_tools": True,
                    "pricing": {"input": True, "output": 1},
                },
                {"status": "live", "supports_tools": True},
            ],
        },
    ]
    models = by_name(catalogue_parse(payload))

    assert "no-slash" not in models
    odd = models["acme/odd-prices"]
    assert [o.provider for o in odd.offers] == ["a", "b", "c"]
    assert all(o.input_price is None and o.output_price is None for o in odd.offers)


@pytest.mark.parametrize("garbage", [None, [], "models", {"data": "x"}, {"models": []}])
def test_an_answer_without_a_data_list_is_an_error(garbage):
    with pytest.raises(CatalogueError):
        catalogue_parse(garbage)

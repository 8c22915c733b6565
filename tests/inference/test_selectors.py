"""Reads for the picker and for costs: choices, prices, resolving a picked value."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from apps.inference.models import InferenceModel
from apps.inference.selectors import (
    cost_usd,
    model_choices,
    offer_price,
    resolve_agent_model,
)

pytestmark = pytest.mark.django_db

D = Decimal


def choice(name):
    return next(c for c in model_choices() if c.name == name)


def test_choices_list_each_model_with_its_usable_providers_cheapest_first(refreshed):
    choices = model_choices()

    assert [c.name for c in choices] == [
        "Qwen/Qwen3-235B-A22B-Instruct-2507",
        "deepseek-ai/DeepSeek-V3.1",
        "meta-llama/Llama-3.1-8B-Instruct",
        "openai/gpt-oss-120b",
    ]
    gpt = choice("openai/gpt-oss-120b")
    # Ranked by output price as the router's :cheapest does, then input price.
    assert [o.provider for o in gpt.offers] == ["novita", "fireworks-ai", "cerebras", "groq"]
    assert gpt.label == "openai/gpt-oss-120b · 4 providers · from $0.10 / $0.50"
    deepseek = choice("deepseek-ai/DeepSeek-V3.1")
    assert [o.provider for o in deepseek.offers] == ["novita", "fireworks-ai", "together"]
    assert deepseek.offers[0].value == "deepseek-ai/DeepSeek-V3.1:novita"
    assert deepseek.offers[0].price_label == "$0.27 / $1.00"


def test_unpriced_providers_come_last_and_say_unpriced_never_zero(refreshed):
    qwen = choice("Qwen/Qwen3-235B-A22B-Instruct-2507")
    llama = choice("meta-llama/Llama-3.1-8B-Instruct")

    assert [(o.provider, o.price_label) for o in qwen.offers] == [
        ("nscale", "$0.20 / $0.60"),
        ("cerebras", "unpriced"),
        ("hyperbolic", "unpriced"),
    ]
    assert qwen.price_label == "from $0.20 / $0.60"
    assert llama.label == "meta-llama/Llama-3.1-8B-Instruct · 1 provider · unpriced"
    assert (llama.input_price, llama.output_price) == (None, None)
    labels = [c.label for c in model_choices()] + [
        o.price_label for c in model_choices() for o in c.offers
    ]
    assert not any("$0.00" in label or "$0 " in label for label in labels)


def test_choices_can_be_searched_by_model_id(refreshed):
    assert [c.name for c in model_choices(q="QWEN 235b")] == ["Qwen/Qwen3-235B-A22B-Instruct-2507"]
    assert model_choices(q="nothing-like-this") == []


def test_fallback_models_are_listed_with_unknown_providers_and_no_price(db):
    InferenceModel.objects.create(
        name="acme/agent-1", owned_by="acme", is_fallback=True, refreshed_at=timezone.now()
    )

    [fallback] = model_choices()

    assert fallback.label == "acme/agent-1 · providers unknown · unpriced"


def test_offer_price_is_the_providers_pair_or_none(refreshed):
    assert offer_price(model_id="deepseek-ai/DeepSeek-V3.1", provider="fireworks-ai") == (
        D("0.56"),
        D("1.68"),
    )
    # A provider that is down still has its price: a run it answered is charged it.
    assert offer_price(model_id="deepseek-ai/DeepSeek-V3.1", provider="sambanova") == (
        D("0.3"),
        D("1.5"),
    )
    assert offer_price(model_id="Qwen/Qwen3-235B-A22B-Instruct-2507", provider="cerebras") is None
    assert offer_price(model_id="deepseek-ai/DeepSeek-V3.1", provider="groq") is None
    assert offer_price(model_id="nobody/nothing", provider="novita") is None


def test_a_plain_model_lets_the_router_choose_and_is_unpriced(refreshed):
    resolved = resolve_agent_model("openai/gpt-oss-120b")

    assert (resolved.model, resolved.provider, resolved.policy) == (
        "openai/gpt-oss-120b",
        None,
        None,
    )
    assert resolved.prices is None
    assert resolved.price_label == "unpriced"
    assert resolved.value == "openai/gpt-oss-120b"


def test_a_pinned_provider_uses_its_own_prices(refreshed):
    resolved = resolve_agent_model(" openai/gpt-oss-120b:groq ")

    assert (resolved.model, resolved.provider, resolved.policy) == (
        "openai/gpt-oss-120b",
        "groq",
        None,
    )
    assert resolved.prices == (D("0.15"), D("0.75"))
    assert resolved.priced_provider == "groq"
    assert resolved.value == "openai/gpt-oss-120b:groq"


def test_a_pinned_unpriced_provider_is_unpriced(refreshed):
    resolved = resolve_agent_model("Qwen/Qwen3-235B-A22B-Instruct-2507:cerebras")

    assert resolved.provider == "cerebras"
    assert resolved.prices is None
    assert resolved.price_label == "unpriced"


def test_cheapest_takes_the_cheapest_priced_providers_prices(refreshed):
    resolved = resolve_agent_model("openai/gpt-oss-120b:cheapest")

    assert (resolved.provider, resolved.policy) == (None, "cheapest")
    assert resolved.priced_provider == "novita"
    assert resolved.prices == (D("0.1"), D("0.5"))
    assert resolved.value == "openai/gpt-oss-120b:cheapest"
    unpriced = resolve_agent_model("meta-llama/Llama-3.1-8B-Instruct:cheapest")
    assert unpriced.prices is None


def test_fastest_is_unpriced_until_the_router_says_who_answered(refreshed):
    resolved = resolve_agent_model("openai/gpt-oss-120b:fastest")

    assert (resolved.provider, resolved.policy, resolved.prices) == (None, "fastest", None)
    assert resolved.value == "openai/gpt-oss-120b:fastest"


def test_the_hub_id_is_matched_without_regard_to_case(refreshed):
    assert resolve_agent_model("OPENAI/GPT-OSS-120B:Groq").value == "openai/gpt-oss-120b:groq"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "Choose an agent model."),
        ("gpt-oss-120b", "not a model id of the form org/model"),
        ("nobody/nothing", "nobody/nothing is not in the catalogue"),
        ("openai/gpt-oss-120b:", "Name a provider after the colon"),
        ("openai/gpt-oss-120b:no such", "is not a provider name"),
        (
            "openai/gpt-oss-120b:together",
            "together does not serve openai/gpt-oss-120b. Providers that can run it: "
            "cerebras, fireworks-ai, groq, novita.",
        ),
        (
            "deepseek-ai/DeepSeek-V3.1:sambanova",
            "sambanova is not live for deepseek-ai/DeepSeek-V3.1",
        ),
        (
            "deepseek-ai/DeepSeek-V3.1:hf-inference",
            "hf-inference cannot call tools with deepseek-ai/DeepSeek-V3.1",
        ),
        ("google/gemma-3-27b-it", "google/gemma-3-27b-it is not in the catalogue"),
    ],
)
def test_it_refuses_what_cannot_run_an_agent_with_a_readable_message(refreshed, value, message):
    with pytest.raises(ValueError) as caught:
        resolve_agent_model(value)

    assert message in str(caught.value)


def test_a_fallback_model_cannot_be_pinned_but_can_be_picked(db):
    InferenceModel.objects.create(
        name="acme/agent-1", is_fallback=True, refreshed_at=timezone.now()
    )

    assert resolve_agent_model("acme/agent-1").prices is None
    assert resolve_agent_model("acme/agent-1:cheapest").prices is None
    with pytest.raises(ValueError, match="providers of acme/agent-1 are unknown"):
        resolve_agent_model("acme/agent-1:novita")


def test_cost_is_tokens_times_price_per_million_exactly():
    prices = (D("0.27"), D("1.1"))
    assert cost_usd(prompt_tokens=12_000, completion_tokens=800, prices=prices) == D("0.00412")
    # A tiny cost stays a tiny cost: it is never rounded to a free-looking 0.
    assert cost_usd(prompt_tokens=1, completion_tokens=0, prices=(D("0.1"), D("0.5"))) == D(
        "0.0000001"
    )
    assert cost_usd(prompt_tokens=0, completion_tokens=0, prices=prices) == D(0)


def test_an_unpriced_cost_is_none_not_zero():
    assert cost_usd(prompt_tokens=12_000, completion_tokens=800, prices=None) is None
    with pytest.raises(ValueError):
        cost_usd(prompt_tokens=-1, completion_tokens=0, prices=(D("0.1"), D("0.5")))


def test_the_form_field_cleans_to_a_resolved_model_or_says_why_not(refreshed):
    from django import forms

    from apps.inference.forms import AgentModelField

    class RunForm(forms.Form):
        agent_model = AgentModelField()

    good = RunForm({"agent_model": "openai/gpt-oss-120b:cheapest"})
    assert good.is_valid()
    assert good.cleaned_data["agent_model"].prices == (D("0.1"), D("0.5"))
    bad = RunForm({"agent_model": "deepseek-ai/DeepSeek-V3.1:sambanova"})
    assert not bad.is_valid()
    assert "sambanova is not live for" in bad.errors["agent_model"][0]
    assert 'value="openai/gpt-oss-120b:fastest"' in str(bad["agent_model"])

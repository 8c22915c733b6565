"""catalogue_refresh: the router's catalogue into the database, and what happens when it fails."""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from apps.inference.models import InferenceModel, ProviderOffer
from apps.inference.services import catalogue_refresh
from tests.support.llm_server import error
from tests.support.processes import free_port

pytestmark = pytest.mark.django_db

FALLBACK = ["acme/tool-caller-1", "acme/tool-caller-2"]


def stored():
    return {
        m.name: {o.provider: o.status for o in m.offers.all()}
        for m in InferenceModel.objects.prefetch_related("offers")
    }


def snapshot():
    """Everything stored but the refresh time."""
    models = list(InferenceModel.objects.values().order_by("name"))
    for row in models:
        row.pop("refreshed_at")
    offers = list(ProviderOffer.objects.values().order_by("model_id", "provider"))
    return models, offers


def test_it_stores_the_routers_usable_models_with_every_provider(router):
    report = catalogue_refresh()

    assert report.source == "router"
    assert report.models == 4
    assert report.offers == 14
    assert stored()["deepseek-ai/DeepSeek-V3.1"] == {
        "fireworks-ai": "live",
        "hf-inference": "live",
        "novita": "live",
        "sambanova": "error",
        "together": "live",
    }
    assert "google/gemma-3-27b-it" not in stored()
    deepseek = InferenceModel.objects.get(name="deepseek-ai/DeepSeek-V3.1")
    assert deepseek.owned_by == "deepseek-ai"
    assert deepseek.is_fallback is False
    assert deepseek.refreshed_at is not None
    assert deepseek.provider_count == 3  # live and tool-capable only
    assert deepseek.cheapest_provider == "novita"
    assert (deepseek.cheapest_input_price, deepseek.cheapest_output_price) == (
        Decimal("0.27"),
        Decimal("1.00"),
    )
    llama = InferenceModel.objects.get(name="meta-llama/Llama-3.1-8B-Instruct")
    assert (llama.provider_count, llama.cheapest_input_price, llama.cheapest_provider) == (
        1,
        None,
        "",
    )


def test_it_reads_the_router_without_any_credential(router, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_server_token_never_sent")

    catalogue_refresh()

    [request] = [r for r in router.requests if r.method == "GET"]
    assert request.path == "/v1/models"
    assert request.authorization is None


def test_refreshing_twice_changes_nothing(router):
    catalogue_refresh()
    first = snapshot()

    report = catalogue_refresh()

    assert snapshot() == first
    assert report.created == []
    assert report.removed == []
    assert len(report.updated) == 4


def test_models_and_providers_that_vanished_are_removed(router, payload):
    catalogue_refresh()
    payload["data"] = [m for m in payload["data"] if m["id"] != "openai/gpt-oss-120b"]
    deepseek = next(m for m in payload["data"] if m["id"] == "deepseek-ai/DeepSeek-V3.1")
    deepseek["providers"] = [p for p in deepseek["providers"] if p["provider"] != "together"]
    deepseek["providers"][0]["pricing"] = {"input": 0.9, "output": 2.5}  # novita got dearer
    qwen = next(m for m in payload["data"] if m["id"].startswith("Qwen/"))
    qwen["providers"][0]["status"] = "error"  # cerebras went down

    report = catalogue_refresh()

    assert report.removed == ["openai/gpt-oss-120b"]
    assert "openai/gpt-oss-120b" not in stored()
    assert not ProviderOffer.objects.filter(model__name="openai/gpt-oss-120b").exists()
    assert "together" not in stored()["deepseek-ai/DeepSeek-V3.1"]
    assert stored()["Qwen/Qwen3-235B-A22B-Instruct-2507"]["cerebras"] == "error"
    deepseek = InferenceModel.objects.get(name="deepseek-ai/DeepSeek-V3.1")
    assert deepseek.provider_count == 2
    assert deepseek.cheapest_provider == "fireworks-ai"
    assert deepseek.cheapest_output_price == Decimal("1.68")


def test_a_model_that_loses_its_last_tool_provider_is_removed(router, payload):
    catalogue_refresh()
    llama = next(m for m in payload["data"] if m["id"] == "meta-llama/Llama-3.1-8B-Instruct")
    llama["providers"][0]["supports_tools"] = False

    catalogue_refresh()

    assert "meta-llama/Llama-3.1-8B-Instruct" not in stored()


@override_settings(TAU2_MODELS_FALLBACK=FALLBACK)
def test_with_the_router_down_and_nothing_stored_it_installs_the_fallback_list(router_down, caplog):
    with caplog.at_level(logging.WARNING, logger="apps.inference.services"):
        report = catalogue_refresh()

    assert report.source == "fallback"
    assert report.error.startswith("ConnectError")
    models = list(InferenceModel.objects.order_by("name"))
    assert [m.name for m in models] == FALLBACK
    assert all(m.is_fallback and m.cheapest_input_price is None for m in models)
    assert not ProviderOffer.objects.exists()
    assert "fallback list of 2 models" in caplog.text


@override_settings(TAU2_MODELS_FALLBACK=FALLBACK)
def test_with_the_router_down_the_stored_catalogue_is_kept(router, monkeypatch, caplog):
    catalogue_refresh()
    before = snapshot()
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", f"http://127.0.0.1:{free_port()}/v1")
    with caplog.at_level(logging.WARNING, logger="apps.inference.services"):
        report = catalogue_refresh()

    assert report.source == "kept"
    assert snapshot() == before
    assert "keeping the 4 stored models" in caplog.text


@pytest.mark.parametrize(
    "answer",
    [
        error(503, "upstream unavailable"),
        error(429, "slow down"),
        "<html>Bad gateway</html>",
        {"error": "no data here"},
        {"object": "list", "data": []},
    ],
    ids=["503", "429", "html", "no-data", "empty"],
)
def test_an_error_or_garbage_answer_keeps_the_stored_catalogue(router, answer):
    catalogue_refresh()
    before = snapshot()
    router.catalogue = answer

    report = catalogue_refresh()

    assert report.source == "kept"
    assert report.error
    assert snapshot() == before


@override_settings(TAU2_MODELS_FALLBACK=FALLBACK)
def test_the_fallback_list_gives_way_to_the_router_once_it_answers(router):
    InferenceModel.objects.create(name=FALLBACK[0], is_fallback=True, refreshed_at=timezone.now())

    report = catalogue_refresh()

    assert report.removed == [FALLBACK[0]]
    assert not InferenceModel.objects.filter(is_fallback=True).exists()
    assert len(stored()) == 4


def test_the_command_refreshes_and_says_what_changed(router, capsys):
    call_command("refresh_models")

    out = capsys.readouterr().out
    assert "4 models, 14 provider offers from the router: 4 new" in out
    assert "new: Qwen/Qwen3-235B-A22B-Instruct-2507, deepseek-ai/DeepSeek-V3.1" in out
    assert len(stored()) == 4

"""/models/, /api/models/, the picker fragment and the staff-only refresh.

People: alice is staff, bob is signed in but not staff, charlie is anonymous.
"""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string
from django.urls import reverse

from apps.inference.models import InferenceModel
from apps.inference.selectors import model_choices

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="pw", is_staff=True)


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob", password="pw")


def test_charlie_sees_the_catalogue_with_prices_and_unpriced_labels(client, refreshed):
    response = client.get("/models/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "openai/gpt-oss-120b" in html
    assert "4 providers" in html
    assert "from $0.10 / $0.50" in html
    assert "1 provider" in html
    assert "unpriced" in html
    assert "$0.00" not in html
    assert "google/gemma-3-27b-it" not in html  # no provider calls tools
    assert 'data-testid="refresh"' not in html  # charlie cannot refresh


def test_the_page_searches_model_ids(client, refreshed):
    html = client.get("/models/", {"q": "llama"}).content.decode()

    assert "meta-llama/Llama-3.1-8B-Instruct" in html
    assert "openai/gpt-oss-120b" not in html


def test_the_page_says_when_the_list_is_the_fallback(client, db):
    from django.utils import timezone

    InferenceModel.objects.create(
        name="acme/agent-1", is_fallback=True, refreshed_at=timezone.now()
    )

    html = client.get("/models/").content.decode()

    assert 'data-testid="fallback"' in html
    assert "providers unknown" in html


def test_charlie_reads_the_api(client, refreshed):
    response = client.get("/api/models/")

    assert response.status_code == 200
    data = {m["name"]: m for m in response.json()}
    assert sorted(data) == [c.name for c in model_choices()]
    gpt = data["openai/gpt-oss-120b"]
    assert gpt["label"] == "openai/gpt-oss-120b · 4 providers · from $0.10 / $0.50"
    assert (gpt["input_price"], gpt["output_price"]) == ("0.100000", "0.500000")
    assert gpt["providers"][0]["provider"] == "novita"
    assert gpt["providers"][0]["value"] == "openai/gpt-oss-120b:novita"
    llama = data["meta-llama/Llama-3.1-8B-Instruct"]
    # Unpriced is null, never 0.
    assert (llama["input_price"], llama["output_price"], llama["price_label"]) == (
        None,
        None,
        "unpriced",
    )
    assert llama["providers"][0]["input_price"] is None


def test_the_api_searches_and_is_in_the_openapi_schema(client, refreshed):
    assert [m["name"] for m in client.get("/api/models/", {"q": "qwen"}).json()] == [
        "Qwen/Qwen3-235B-A22B-Instruct-2507"
    ]
    schema = client.get(reverse("api:schema")).content.decode()
    assert "/api/models/" in schema


def test_the_picker_offers_the_router_policies_and_each_provider(refreshed):
    html = render_to_string(
        "includes/model_picker.html",
        {"choices": model_choices(), "selected": "openai/gpt-oss-120b:groq"},
    )

    assert 'name="agent_model"' in html
    assert 'value="openai/gpt-oss-120b"' in html
    assert 'value="openai/gpt-oss-120b:fastest"' in html
    assert 'value="openai/gpt-oss-120b:cheapest"' in html
    assert 'value="openai/gpt-oss-120b:groq" selected' in html
    assert "openai/gpt-oss-120b · 4 providers · from $0.10 / $0.50" in html
    assert "meta-llama/Llama-3.1-8B-Instruct · 1 provider · unpriced" in html
    assert "pin cerebras · unpriced" in html
    assert "$0.00" not in html


def test_charlie_cannot_refresh(client, router):
    response = client.post("/models/refresh/")

    assert response.status_code == 403
    assert not InferenceModel.objects.exists()
    assert not [r for r in router.requests if r.method == "GET"]


def test_bob_cannot_refresh(client, router, bob):
    client.force_login(bob)

    assert client.post("/models/refresh/").status_code == 403
    assert not InferenceModel.objects.exists()


def test_alice_refreshes_now_and_sees_what_changed(client, router, alice):
    client.force_login(alice)
    assert 'data-testid="refresh"' in client.get("/models/").content.decode()

    response = client.post("/models/refresh/", follow=True)

    assert response.redirect_chain == [("/models/", 302)]
    assert "4 models, 14 provider offers from the router: 4 new" in response.content.decode()
    assert InferenceModel.objects.count() == 4


def test_refresh_is_post_only(client, alice):
    client.force_login(alice)

    assert client.get("/models/refresh/").status_code == 405


def test_the_admin_lists_the_catalogue_read_only(admin_client, refreshed):
    response = admin_client.get("/admin/inference/inferencemodel/")

    assert response.status_code == 200
    assert "openai/gpt-oss-120b" in response.content.decode()
    model = InferenceModel.objects.get(name="openai/gpt-oss-120b")
    detail = admin_client.get(f"/admin/inference/inferencemodel/{model.pk}/change/")
    assert detail.status_code == 200
    assert "fireworks-ai" in detail.content.decode()
    assert admin_client.get("/admin/inference/inferencemodel/add/").status_code == 403

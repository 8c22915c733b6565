"""Playing banking_knowledge with an embedding configuration (τ² 1.x): alice names an
embeddings model on stella's team connection "Team embeddings" for openai_embeddings; her
searches are embedded there with its key and counted on her session, and the start form
refuses the configuration without one, saying what to choose."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest

from apps.runs.models import Run
from tests.play.test_play import customer_answered, tool
from tests.runs.conftest import wait_for
from tests.support import connections as with_connections
from tests.support.connections import openai_compatible_connection
from tests.support.scripts import BANKING_TASK, banking_script

pytestmark = pytest.mark.upstream

staff = with_connections.staff
connections_cleared = with_connections.connections_cleared

DOMAIN, TASK = BANKING_TASK
EMBED_KEY = "sk-embed-CANARY-play-5a2c8e91d7"
EMBED_MODEL = "text-embedding-3-large"


def _embeds(llm, *, by, slug: str = "team-embeddings"):
    return openai_compatible_connection(
        llm,
        by=by,
        name="Team embeddings",
        slug=slug,
        api_key=EMBED_KEY,
        models=[(EMBED_MODEL, (Decimal("0.13"), Decimal("0")))],
    )


def _form(**more) -> dict:
    return {"domain": DOMAIN, "task_id": TASK, "split": "base", **more}


def test_the_start_form_asks_for_an_embeddings_model_for_a_configuration_that_embeds(
    staff, alice_client, llm_server
):
    page = alice_client.get("/play/new/").content.decode()
    assert '<option value="openai_embeddings">openai_embeddings</option>' in page
    response = alice_client.post("/play/new/", _form(retrieval_config="openai_embeddings"))
    assert response.status_code == 400
    assert "choose an embeddings model on one of your connections" in response.content.decode()
    # The router has no embeddings API.
    response = alice_client.post(
        "/play/new/",
        _form(
            retrieval_config="openai_embeddings", embedding_model="deepseek-ai/DeepSeek-V4.1-Flash"
        ),
    )
    assert response.status_code == 400
    assert "Embeddings run on a connection" in response.content.decode()
    assert not Run.objects.exists()


@pytest.mark.slow
def test_alice_searches_with_embeddings_on_the_team_connection(
    staff, celery_worker, llm_server, alice, alice_client
):
    banking_script(llm_server)
    # A connection model no run embedded with yet (the worker's and this process's
    # cache, TAU2_EMBEDDINGS_CACHE_DIR, are shared: the search reads the documents there).
    slug = f"embeds-{uuid.uuid4().hex[:8]}"
    _embeds(llm_server, by=staff, slug=slug)
    response = alice_client.post(
        "/play/new/",
        _form(
            retrieval_config="openai_embeddings",
            embedding_model=f"@{slug}/{EMBED_MODEL}",
        ),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    run = Run.objects.get(kind=Run.Kind.HUMAN)
    assert run.retrieval_config == "openai_embeddings" and run.embedding_model == EMBED_MODEL
    page = alice_client.get(f"/play/{run.pk}/").content.decode()
    assert 'value="KB_search"' in page  # the configuration's knowledge tool
    run = wait_for(run, customer_answered(1), what="the customer's opening message")
    indexed = Run.objects.get(pk=run.pk).embedding_prompt_tokens
    assert indexed > 10_000  # the knowledge base, embedded on the customer's first turn

    response = tool(alice_client, run, "KB_search", query="gold rewards card cash back")

    assert response.status_code == 200, response.content
    assert "Gold Rewards" in response.json()["events"][1]["html"]
    sent = llm_server.embedding_requests()
    assert {r.token for r in sent} == {EMBED_KEY}
    assert ["gold rewards card cash back"] in [r.body["input"] for r in sent]
    run.refresh_from_db()
    assert run.embedding_prompt_tokens == indexed + 5
    assert run.embedding_cost_usd is not None and run.embedding_cost_usd > 0

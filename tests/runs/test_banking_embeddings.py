"""Model runs on banking_knowledge's embedding configurations (τ² 1.x) through a
connection: stella (staff) adds "Team vLLM" (the agent and the customer) and "Team
embeddings" (text-embedding-3-large at $0.13 per 1M tokens) on the scripted server; alice
runs openai_embeddings with her embeddings there. The embeddings go to that connection
with its key, their tokens are priced and spent on it, its budget can refuse the run, and
an endpoint that cannot be reached fails the run saying why — never left "running".
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connections
from django.utils import timezone

from apps.evaluations.models import Evaluation
from apps.races.forms import RaceForm
from apps.runs import budgets
from apps.runs.exports import run_export_tau2
from apps.runs.forms import RunForm, spec_from
from apps.runs.models import Run
from apps.runs.presenters import cost_view
from apps.runs.runner import run_execute
from apps.runs.services import model_run_build
from apps.runs.spec import RunSpec, Side, spec_columns, spec_read
from apps.tasks.models import Task
from tau2_env.engine.evaluation import trial_seeds
from tests.support import connections as with_connections
from tests.support.connections import CONNECTION_KEY, openai_compatible_connection
from tests.support.scripts import BANKING_TASK, banking_script

pytestmark = pytest.mark.upstream

staff = with_connections.staff
connections_cleared = with_connections.connections_cleared

DOMAIN, TASK = BANKING_TASK
CONFIG = "openai_embeddings"
CHAT_MODEL = "scripted-agent"
EMBED_MODEL = "text-embedding-3-large"
EMBED_KEY = "sk-embed-CANARY-3f9a1c7e55d2b804"
EMBED_PRICE = Decimal("0.13")  # USD per 1M input tokens


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """No knowledge base embedded yet: each test's run pays for it."""
    monkeypatch.setenv("TAU2_EMBEDDINGS_CACHE_DIR", str(tmp_path / "embeddings"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def _connections(llm, *, by, base_url: str | None = None, **team):
    chat = openai_compatible_connection(
        llm, by=by, name="Team vLLM", models=[(CHAT_MODEL, (Decimal("1"), Decimal("2")))]
    )
    embeds = openai_compatible_connection(
        llm,
        by=by,
        base_url=base_url,
        name="Team embeddings",
        api_key=EMBED_KEY,
        models=[(EMBED_MODEL, (EMBED_PRICE, Decimal("0")))],
        **team,
    )
    return chat, embeds


def _queued(*, user, chat, embeds) -> Run:
    task = Task.objects.get(domain_id=DOMAIN, task_id=TASK)
    run = model_run_build(
        user=user,
        task=task,
        spec=RunSpec(
            agent=Side(CHAT_MODEL, chat),
            customer=Side(CHAT_MODEL, chat),
            max_steps=20,
            seed=300,
            retrieval_config=CONFIG,
            embedder=Side(EMBED_MODEL, embeds),
        ),
        trial=0,
        trial_seed=trial_seeds(300, 1)[0],
        prices=("1", "2"),
    )
    run.save()
    return run


def _execute(run: Run) -> Run:
    try:
        run_execute(run_id=run.pk, worker="embeddings-test")
    finally:
        connections.close_all()
    return Run.objects.get(pk=run.pk)


def test_a_run_embeds_on_its_connection_with_its_key_and_counts_the_cost(
    staff, alice, llm_server, fresh_cache
):
    banking_script(llm_server)
    chat, embeds = _connections(llm_server, by=staff)
    run = _execute(_queued(user=alice, chat=chat, embeds=embeds))

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    sent = llm_server.embedding_requests()
    assert len(sent) >= 2  # the knowledge base, then the agent's search
    assert {r.token for r in sent} == {EMBED_KEY}
    assert {r.body["model"] for r in sent} == {EMBED_MODEL}
    assert {r.token for r in llm_server.chat_requests()} == {CONNECTION_KEY}
    # Priced at the embeddings model's input price, and spent on its connection.
    assert run.embedding_prompt_tokens > 10_000
    expected = run.embedding_prompt_tokens * EMBED_PRICE / 1_000_000
    assert run.embedding_cost_usd == pytest.approx(expected, abs=Decimal("0.000001"))
    assert budgets.connection_spend(connection=embeds).spent == run.embedding_cost_usd
    roles = {r["role"]: r for r in cost_view(run)["roles"]}
    assert roles["embeddings"]["cost"] == run.embedding_cost_usd
    # Provenance records the configuration and what embedded for it, never the key.
    assert run.provenance["retrieval_config"] == CONFIG
    embedder = run.provenance["embedder"]
    assert embedder["model"] == EMBED_MODEL and embedder["tau2_model"] == EMBED_MODEL
    assert embedder["connection"]["name"] == "Team embeddings"
    assert EMBED_KEY not in str(run.provenance)
    # Its τ² results file: the configuration as tau2 run records it, and the model.
    info = run_export_tau2(run)["info"]
    assert info["retrieval_config"] == CONFIG
    assert info["tau2_studio"]["embedding_model"] == f"openai/{EMBED_MODEL}"


def test_a_run_whose_embeddings_connection_spent_its_budget_is_refused_before_it_starts(
    staff, alice, llm_server, fresh_cache
):
    banking_script(llm_server)
    chat, embeds = _connections(llm_server, by=staff, monthly_budget_usd=Decimal("0.50"))
    earlier = _queued(user=alice, chat=chat, embeds=embeds)
    Run.objects.filter(pk=earlier.pk).update(
        status=Run.Status.COMPLETED,
        started_at=timezone.now(),
        finished_at=timezone.now(),
        embedding_prompt_tokens=4_000_000,
        embedding_cost_usd=Decimal("0.52"),
    )

    run = _execute(_queued(user=alice, chat=chat, embeds=embeds))

    assert run.status == Run.Status.FAILED and run.failure == Run.Failure.BUDGET
    assert "Team embeddings" in run.error and "$0.50 budget" in run.error
    assert "embeddings are made on it" in run.error
    assert not llm_server.embedding_requests() and not llm_server.chat_requests()


def test_an_unreachable_embeddings_endpoint_fails_the_run_saying_why(
    staff, alice, llm_server, fresh_cache
):
    banking_script(llm_server)
    chat, embeds = _connections(llm_server, by=staff, base_url="http://127.0.0.1:9/v1")

    run = _execute(_queued(user=alice, chat=chat, embeds=embeds))

    assert run.status == Run.Status.FAILED
    assert run.error.startswith("The knowledge base could not be embedded: Embeddings on")
    assert "Team embeddings" in run.error and "refused the connection" in run.error
    assert EMBED_KEY not in run.error
    assert run.finished_at is not None  # ended, never left "running"


def test_an_evaluation_keeps_its_embeddings_model_for_every_run_and_its_export(
    staff, alice, llm_server
):
    chat, embeds = _connections(llm_server, by=staff)
    spec = RunSpec(
        agent=Side(CHAT_MODEL, chat),
        customer=Side(CHAT_MODEL, chat),
        seed=300,
        retrieval_config=CONFIG,
        embedder=Side(EMBED_MODEL, embeds),
    )
    evaluation = Evaluation(**spec_columns(spec, seed_field="seed"), domain=DOMAIN)
    assert evaluation.embedding_model == EMBED_MODEL
    assert evaluation.embedding_connection == embeds
    read = spec_read(evaluation, seed_field="seed")
    assert read.embedder == Side(EMBED_MODEL, embeds) and read.retrieval_config == CONFIG
    # Each of its runs is built from that spec: the same embeddings model.
    run = model_run_build(
        user=alice,
        task=Task.objects.get(domain_id=DOMAIN, task_id=TASK),
        spec=read,
        trial=0,
        trial_seed=1,
        prices=None,
    )
    assert (run.embedding_model, run.embedding_connection) == (EMBED_MODEL, embeds)
    # Without one, a configuration that embeds is refused, saying what to choose.
    with pytest.raises(ValidationError, match="choose an embeddings model"):
        model_run_build(
            user=alice,
            task=Task.objects.get(domain_id=DOMAIN, task_id=TASK),
            spec=replace(read, embedder=None),
            trial=0,
            trial_seed=1,
            prices=None,
        )


def test_the_run_and_race_forms_take_an_embeddings_model_on_a_connection(staff, alice, llm_server):
    chat, embeds = _connections(llm_server, by=staff)
    data = {
        "domain": DOMAIN,
        "task_id": TASK,
        "agent_model": f"@{chat.slug}/{CHAT_MODEL}",
        "user_model": f"@{chat.slug}/{CHAT_MODEL}",
        "max_steps": 20,
        "retrieval_config": CONFIG,
    }
    embedding = f"@{embeds.slug}/{EMBED_MODEL}"
    form = RunForm({**data, "embedding_model": embedding}, user=alice)
    assert form.is_valid(), form.errors
    assert spec_from(form.cleaned_data).embedder == Side(EMBED_MODEL, embeds)

    race = RaceForm(
        {**data, "agent_model": [data["agent_model"], embedding], "embedding_model": embedding},
        user=alice,
    )
    assert race.is_valid(), race.errors
    assert spec_from(race.cleaned_data, lanes=True).embedder == Side(EMBED_MODEL, embeds)

    refused = RunForm(data, user=alice)
    assert not refused.is_valid()
    assert "choose an embeddings model" in refused.errors["embedding_model"][0]
    # The router has no embeddings API.
    router = RunForm({**data, "embedding_model": "deepseek-ai/DeepSeek-V4.1-Flash"}, user=alice)
    assert not router.is_valid()
    assert "Embeddings run on a connection" in router.errors["embedding_model"][0]

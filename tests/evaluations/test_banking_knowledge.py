"""banking_knowledge evaluations (τ² 1.x): the retrieval configuration is a setting of the
evaluation and of each run, played on a real Celery worker, and part of what the
evaluation is (provenance, pooling identity, exports, the form)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.evaluations import services
from apps.evaluations.exports import evaluation_export, evaluation_export_tau2
from apps.evaluations.models import Evaluation
from apps.evaluations.pooling import differences, identity_of
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tau2_env.engine import catalog
from tests.evaluations.test_api_start import key_of, post
from tests.evaluations.test_evaluations import wait_until
from tests.support.scripts import AGENT_MODEL, BANKING_TASK, banking_agent_tools, banking_script

pytestmark = pytest.mark.upstream

DOMAIN, TASK = BANKING_TASK


def _evaluation(alice, retrieval_config: str = "") -> Evaluation:
    return services.evaluation_create(
        user=alice,
        spec=RunSpec(agent=Side(AGENT_MODEL), seed=300, retrieval_config=retrieval_config),
        tasks=services.TaskChoice(domain=DOMAIN, task_ids=[TASK]),
        num_trials=1,
        concurrency=1,
    )


@pytest.mark.slow
def test_a_banking_evaluation_runs_offline_with_bm25_by_default(
    celery_worker, llm_server, alice, alice_client
):
    banking_script(llm_server)
    evaluation = _evaluation(alice)
    assert evaluation.retrieval_config == "bm25"
    assert evaluation.provenance["retrieval_config"] == "bm25"

    evaluation = wait_until(evaluation, lambda e: e.status == Evaluation.Status.COMPLETED)

    (run,) = evaluation.runs.all()
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.retrieval_config == "bm25" and run.provenance["retrieval_config"] == "bm25"
    assert run.reward == 1.0
    agent_tools = banking_agent_tools(llm_server)
    assert "KB_search" in agent_tools and "grep" not in agent_tools

    for page in (f"/runs/{run.pk}/", f"/evaluations/{evaluation.pk}/"):
        assert "retrieval bm25" in alice_client.get(page).content.decode()

    exported = evaluation_export(evaluation)
    assert exported["retrieval_config"] == "bm25"
    info = evaluation_export_tau2(evaluation)["info"]
    assert info["retrieval_config"] == "bm25"
    assert info["environment_info"]["policy"] == catalog.results_policy(DOMAIN, "bm25")


@pytest.mark.slow
def test_an_evaluation_with_grep_only_gives_its_agent_grep_and_is_ranked_apart(
    celery_worker, llm_server, alice
):
    banking_script(llm_server)
    grep = wait_until(
        _evaluation(alice, "grep_only"), lambda e: e.status == Evaluation.Status.COMPLETED
    )
    (run,) = grep.runs.all()
    assert run.retrieval_config == "grep_only" and run.reward == 1.0
    agent_tools = banking_agent_tools(llm_server)
    assert "grep" in agent_tools and "KB_search" not in agent_tools

    bm25 = _evaluation(alice, "bm25")
    said = differences(identity_of(grep), identity_of(bm25))
    assert said == ["another retrieval configuration (grep_only, not bm25)"]
    assert identity_of(grep).key != identity_of(bm25).key


def test_a_configuration_this_server_cannot_run_is_refused_with_the_reason(alice, llm_server):
    with pytest.raises(ValidationError, match="OpenAI embeddings"):
        _evaluation(alice, "alltools")
    with pytest.raises(ValidationError, match="no retrieval configurations"):
        services.evaluation_create(
            user=alice,
            spec=RunSpec(agent=Side(AGENT_MODEL), retrieval_config="bm25"),
            tasks=services.TaskChoice(domain="airline", task_ids=["27"]),
            num_trials=1,
        )


def test_the_form_offers_the_configurations_the_unrunnable_ones_disabled_with_why(
    alice_client, llm_server
):
    page = alice_client.get(reverse("evaluations:new")).content.decode()
    assert 'data-testid="retrieval-config"' in page
    assert '<option value="bm25">bm25</option>' in page
    assert '<option value="alltools" disabled title="alltools needs OpenAI embeddings' in page

    run_page = alice_client.get(reverse("runs:new")).content.decode()
    assert 'data-testid="retrieval-config"' in run_page


def test_the_form_refuses_a_configuration_for_a_domain_without_retrieval(alice_client, llm_server):
    response = alice_client.post(
        reverse("evaluations:new"),
        {
            "domain": "airline",
            "split": "test",
            "agent_model": AGENT_MODEL,
            "num_trials": 1,
            "retrieval_config": "bm25",
        },
    )
    assert response.status_code == 400
    assert "airline has no retrieval configurations" in response.content.decode()


def test_the_api_starts_a_banking_evaluation_with_a_configuration_and_says_it(
    alice, llm_server, settings
):
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0  # its runs are created and stay queued
    key = key_of(alice)
    body = {"domain": DOMAIN, "split": "base", "task_ids": [TASK], "agent_model": AGENT_MODEL}
    response = post(
        "/api/evaluations/", key=key, body={**body, "retrieval_config": "golden_retrieval"}
    )
    assert response.status_code == 201, response.content
    assert response.json()["retrieval_config"] == "golden_retrieval"
    assert Evaluation.objects.get(pk=response.json()["id"]).retrieval_config == "golden_retrieval"

    refused = post(
        "/api/evaluations/", key=key, body={**body, "retrieval_config": "openai_embeddings"}
    )
    assert refused.status_code == 400
    # It runs with its embeddings on a connection: without an embeddings model, refused.
    assert "OpenAI embeddings" in refused.json()["embedding_model"][0]
    assert "choose an embeddings model" in refused.json()["embedding_model"][0]

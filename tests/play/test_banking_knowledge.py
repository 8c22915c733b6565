"""Playing banking_knowledge (τ² 1.x): the play page offers the agent's knowledge tool of
the default retrieval configuration (bm25's KB_search), a person searches the bank's
documents with it and solves task_001; τ² scores the session."""

import pytest

from apps.runs.models import Run
from tests.play.test_play import JSON, customer_answered, kinds, start, tool
from tests.runs.conftest import finished, wait_for
from tests.support.scripts import BANKING_TASK, banking_script

pytestmark = [pytest.mark.slow, pytest.mark.upstream]

DOMAIN, TASK = BANKING_TASK


def test_alice_searches_the_knowledge_base_and_solves_task_001(
    celery_worker, llm_server, alice, alice_client
):
    banking_script(llm_server)
    run = start(alice_client, domain=DOMAIN, task=TASK)
    assert run.retrieval_config == "bm25"
    page = alice_client.get(f"/play/{run.pk}/").content.decode()
    assert "KB_search" in page  # the play form offers the agent's knowledge tool
    run = wait_for(run, customer_answered(1), what="the customer's opening message")

    response = tool(alice_client, run, "KB_search", query="gold rewards card cash back")
    assert response.status_code == 200, response.content
    assert "Gold Rewards" in response.json()["events"][1]["html"]

    response = alice_client.post(
        f"/play/{run.pk}/say/", {"text": "The Gold Rewards Card suits you best."}, **JSON
    )
    assert response.status_code == 200
    # The customer applies with their own tool, then stops: the session ends and is scored.
    run = wait_for(run, finished, what="the customer's application and stop")

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.termination_reason == "user_stop"
    assert run.reward == 1.0
    assert "tool_result" in kinds(run)


def test_the_start_form_offers_the_configurations_the_unrunnable_ones_disabled_with_why(
    alice_client, llm_server
):
    page = alice_client.get("/play/new/").content.decode()
    assert 'data-testid="retrieval-config"' in page
    assert '<option value="grep_only">grep_only</option>' in page
    assert '<option value="alltools" disabled title="alltools needs OpenAI embeddings' in page


def test_the_start_form_refuses_a_configuration_this_server_cannot_run(alice_client, llm_server):
    response = alice_client.post(
        "/play/new/",
        {"domain": DOMAIN, "task_id": TASK, "split": "base", "retrieval_config": "alltools"},
    )
    assert response.status_code == 400
    assert "alltools needs OpenAI embeddings" in response.content.decode()
    assert not Run.objects.exists()


def test_alice_plays_task_001_with_grep_only_and_gets_grep_instead_of_kb_search(
    celery_worker, llm_server, alice, alice_client
):
    banking_script(llm_server)
    response = alice_client.post(
        "/play/new/",
        {"domain": DOMAIN, "task_id": TASK, "split": "base", "retrieval_config": "grep_only"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get(kind=Run.Kind.HUMAN)
    assert run.retrieval_config == "grep_only"
    page = alice_client.get(f"/play/{run.pk}/").content.decode()
    assert '<option value="grep">grep (read)</option>' in page
    assert 'value="KB_search"' not in page
    assert "provided <code>grep</code> tool" in page  # the policy the agent reads with it
    run = wait_for(run, customer_answered(1), what="the customer's opening message")

    refused = tool(alice_client, run, "KB_search", query="gold rewards")
    assert refused.status_code == 400  # bm25's tool is not this session's
    assert "no tool 'KB_search'" in refused.content.decode()

    response = tool(alice_client, run, "grep", pattern="Gold Rewards Card")
    assert response.status_code == 200, response.content
    assert "Gold Rewards" in response.json()["events"][1]["html"]

    response = alice_client.post(
        f"/play/{run.pk}/say/", {"text": "The Gold Rewards Card suits you best."}, **JSON
    )
    assert response.status_code == 200
    run = wait_for(run, finished, what="the customer's application and stop")

    assert run.status == Run.Status.COMPLETED, run.error
    assert run.reward == 1.0
    assert "tool_result" in kinds(run)

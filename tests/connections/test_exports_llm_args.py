"""Both exports carry each side's τ² LLM arguments and its model as τ² names it (the
litellm model string ``tau2 run --agent-llm`` takes): the run's τ² results file and the
evaluation's, read back by τ²'s own ``Results.load``, imported again with the arguments
kept — and never a key, nor a base URL's query.

alice's runs and evaluation are on her own OpenAI-compatible connection (``Our vLLM``)
to the scripted server, whose base URL carries a query (a signed endpoint's, say).
"""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from apps.connections.services import ConnectionFields, connection_create
from apps.evaluations.imports import evaluation_import
from apps.evaluations.models import Evaluation
from apps.runs.exports import tau2_llm
from apps.runs.models import Run, RunEvent
from apps.runs.services import model_run_build
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.connections import (  # noqa: F401 - fixtures
    CONNECTION_KEY,
    CONNECTION_MODEL,
    connections_cleared,
)
from tests.support.evaluations import conversation, stored_evaluation

AGENT_ARGS = {"temperature": 0.3, "reasoning_effort": "high", "top_k": 20}
USER_ARGS = {"temperature": 0.7}
QUERY = "sig=query-CANARY-5e1f"
LITELLM_NAME = f"openai/{CONNECTION_MODEL}"
SECRETS = (CONNECTION_KEY, "CANARY", QUERY)


@pytest.fixture
def connection(alice, llm_server, connections_cleared):  # noqa: F811
    return connection_create(
        by=alice,
        owner=alice,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Our vLLM",
            base_url=f"{llm_server.base_url}?{QUERY}",
            api_key=CONNECTION_KEY,
            models=[(CONNECTION_MODEL, (Decimal("1"), Decimal("2")))],
        ),
    )


def assert_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def finished_run(alice, *, connection=None, agent_args=None, user_args=None, **fields) -> Run:
    """A completed model run of airline/27 built as run_create builds one (two messages)."""
    task = Task.objects.get(domain_id="airline", task_id="27")
    run = model_run_build(
        user=alice,
        task=task,
        spec=RunSpec(
            agent=Side(fields.pop("agent_model", CONNECTION_MODEL), connection, agent_args),
            customer=Side(fields.pop("user_model", CONNECTION_MODEL), connection, user_args),
            max_steps=30,
            seed=300,
        ),
        trial=0,
        trial_seed=626729,
        prices=None,
    )
    run.status = Run.Status.COMPLETED
    run.termination_reason = "user_stop"
    for name, value in fields.items():
        setattr(run, name, value)
    run.save()
    RunEvent.objects.bulk_create(
        [
            RunEvent(
                run=run,
                seq=0,
                kind="agent",
                message={"role": "assistant", "content": "Hi! How can I help you today?"},
            ),
            RunEvent(
                run=run,
                seq=1,
                kind="customer",
                message={"role": "user", "content": "Bye ###STOP###"},
            ),
        ]
    )
    return run


def load(response, tmp_path):
    from tau2.data_model.simulation import Results

    assert response.status_code == 200
    path = tmp_path / "results.json"
    path.write_bytes(response.content)
    return Results.load(path)  # τ²'s own reader


def test_the_runs_tau2_file_carries_each_sides_arguments_and_litellm_model(
    alice, alice_client, llm_server, connection, tmp_path
):
    run = finished_run(alice, connection=connection, agent_args=AGENT_ARGS, user_args=USER_ARGS)

    response = alice_client.get(f"/runs/{run.pk}.json?format=tau2")

    assert_no_secret(response.content.decode())
    results = load(response, tmp_path)
    agent, user = results.info.agent_info, results.info.user_info
    assert (agent.implementation, agent.llm, agent.llm_args) == (
        "llm_agent",
        LITELLM_NAME,
        AGENT_ARGS,
    )
    assert (user.implementation, user.llm, user.llm_args) == (
        "user_simulator",
        LITELLM_NAME,
        USER_ARGS,
    )
    studio = json.loads(response.content)["info"]["tau2_studio"]
    assert studio["agent"]["connection"]["name"] == "Our vLLM"
    # Where it ran, without the endpoint's query.
    assert studio["agent"]["connection"]["base_url"] == llm_server.base_url
    assert studio["user"]["connection"]["base_url"] == llm_server.base_url


def test_the_runs_studio_json_names_the_connections_and_the_arguments(
    alice, alice_client, llm_server, connection
):
    run = finished_run(alice, connection=connection, agent_args=AGENT_ARGS, user_args=USER_ARGS)

    response = alice_client.get(f"/runs/{run.pk}.json")

    assert_no_secret(response.content.decode())
    data = json.loads(response.content)
    assert (data["agent_connection"], data["user_connection"]) == ("Our vLLM", "Our vLLM")
    assert (data["agent_llm_args"], data["user_llm_args"]) == (AGENT_ARGS, USER_ARGS)
    assert data["provenance"]["agent"]["llm_args"] == AGENT_ARGS
    assert data["provenance"]["agent"]["connection"]["base_url"] == llm_server.base_url


def test_a_run_from_before_arguments_exports_tau2s_default_and_the_routers_model(
    alice, alice_client, tmp_path
):
    run = finished_run(
        alice, agent_model="org/agent-a:novita", user_model="org/customer", provenance={}
    )
    Run.objects.filter(pk=run.pk).update(agent_llm_args=None, user_llm_args=None)

    results = load(alice_client.get(f"/runs/{run.pk}.json?format=tau2"), tmp_path)

    assert results.info.agent_info.llm == "org/agent-a:novita"  # the router's, as before
    assert results.info.agent_info.llm_args == {"temperature": 0.0}
    assert results.info.user_info.llm == "org/customer"
    assert results.info.user_info.llm_args == {"temperature": 0.0}


def test_a_person_playing_the_agent_is_human_with_no_model_and_no_arguments(
    alice, alice_client, tmp_path
):
    run = finished_run(alice, agent_model="a person", user_model="org/customer", kind="human")

    agent = load(alice_client.get(f"/runs/{run.pk}.json?format=tau2"), tmp_path).info.agent_info

    assert (agent.implementation, agent.llm, agent.llm_args) == ("human", None, None)


@pytest.mark.parametrize(
    ("kind", "named"),
    [
        ("openai", "openai/gpt-4.1"),
        ("anthropic", "anthropic/gpt-4.1"),
        ("gemini", "gemini/gpt-4.1"),
        ("mistral", "mistral/gpt-4.1"),
        ("openrouter", "openrouter/gpt-4.1"),
        ("together", "together_ai/gpt-4.1"),
        ("fireworks", "fireworks_ai/gpt-4.1"),
    ],
)
def test_each_kind_of_connection_names_its_model_as_litellm_does(
    alice,
    connections_cleared,  # noqa: F811
    kind,
    named,
):
    connection = connection_create(
        by=alice,
        owner=alice,
        kind=kind,
        fields=ConnectionFields(name=f"My {kind}", api_key="sk-x", models=["gpt-4.1"]),
    )

    assert tau2_llm(connection=connection, model="gpt-4.1") == named
    assert tau2_llm(connection=None, model="org/model:novita") == "org/model:novita"


@pytest.fixture
def evaluation(alice, llm_server, connection):
    solved = conversation(llm_server, domain="airline", task_id="27", solve=True)
    unsolved = conversation(llm_server, domain="airline", task_id="2", solve=False)
    evaluation = stored_evaluation(
        alice,
        outcomes={"27": [solved, solved], "2": [unsolved, unsolved]},
        split="",
        agent_model=CONNECTION_MODEL,
        user_model=CONNECTION_MODEL,
    )
    Evaluation.objects.filter(pk=evaluation.pk).update(
        agent_connection=connection,
        user_connection=connection,
        agent_llm_args=AGENT_ARGS,
        user_llm_args=USER_ARGS,
    )
    evaluation.refresh_from_db()
    return evaluation


def test_the_evaluations_tau2_file_carries_the_arguments_and_tau2_reads_it(
    alice_client, evaluation, tmp_path
):
    response = alice_client.get(f"/evaluations/{evaluation.pk}.json?format=tau2")

    assert_no_secret(response.content.decode())
    results = load(response, tmp_path)
    assert results.info.num_trials == 2 and len(results.simulations) == 4
    assert (results.info.agent_info.llm, results.info.agent_info.llm_args) == (
        LITELLM_NAME,
        AGENT_ARGS,
    )
    assert (results.info.user_info.llm, results.info.user_info.llm_args) == (
        LITELLM_NAME,
        USER_ARGS,
    )


def test_the_evaluations_studio_json_names_the_connections_and_the_arguments(
    bob_client, evaluation
):
    response = bob_client.get(f"/evaluations/{evaluation.pk}.json")

    assert_no_secret(response.content.decode())
    data = json.loads(response.content)
    assert (data["agent_connection"], data["user_connection"]) == ("Our vLLM", "Our vLLM")
    assert (data["agent_llm_args"], data["user_llm_args"]) == (AGENT_ARGS, USER_ARGS)


def test_an_export_imported_again_keeps_the_arguments(
    bob, alice_client, bob_client, evaluation, tmp_path
):
    exported = alice_client.get(f"/evaluations/{evaluation.pk}.json?format=tau2").content
    # As tau2 run writes them, a file's arguments may hold the endpoint and the key.
    data = json.loads(exported)
    data["info"]["agent_info"]["llm_args"].update(api_key="sk-file-CANARY", api_base="http://x")

    imported = evaluation_import(user=bob, data=json.dumps(data).encode(), name="round trip")

    assert (imported.agent_llm_args, imported.user_llm_args) == (AGENT_ARGS, USER_ARGS)
    runs = list(imported.runs.all())
    assert runs and all(
        (r.agent_llm_args, r.user_llm_args) == (AGENT_ARGS, USER_ARGS) for r in runs
    )
    assert imported.agent_model == LITELLM_NAME  # as the file names it
    again = load(bob_client.get(f"/evaluations/{imported.pk}.json?format=tau2"), tmp_path)
    assert (again.info.agent_info.llm, again.info.agent_info.llm_args) == (LITELLM_NAME, AGENT_ARGS)
    assert (again.info.user_info.llm, again.info.user_info.llm_args) == (LITELLM_NAME, USER_ARGS)
    assert "CANARY" not in bob_client.get(f"/evaluations/{imported.pk}.json").content.decode()


def test_the_evaluation_page_shows_where_each_side_ran_with_its_arguments(alice_client, evaluation):
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()

    agent = page.split('data-testid="side-agent"')[1].split("</div>")[0]
    assert CONNECTION_MODEL in agent and "Our vLLM (OpenAI-compatible endpoint)" in agent
    assert "temperature 0.3 · reasoning_effort high · top_k 20" in agent
    customer = page.split('data-testid="side-customer"')[1].split("</div>")[0]
    assert "temperature 0.7" in customer and "τ²'s default" not in customer
    assert_no_secret(page)

"""τ²'s ablations as evaluation modes: a mode's run sends what ``tau2 run`` sends in it.

The parity tests play one task twice against one scripted server: once by τ²'s own
``tau2 run`` CLI in a subprocess (``--agent llm_agent_solo --user dummy_user`` for
No-User, ``--agent llm_agent_gt`` for Oracle plan; both sides ``openai/<model>`` with
the server in their ``--*-llm-args``' ``api_base``), once by the product (an evaluation
in that mode on an OpenAI-compatible connection, driven by the real Celery worker).
The scripted model is deterministic — each answer follows from the request it answers,
tool-call ids counted from zero in both plays — so both conversations go the same way;
then the JSON bodies of the model requests are identical, in order (key order too), and
``reward_info`` is the results file's. The export names each side as ``tau2 run`` does.

alice (signed in) starts the evaluations; a No-User evaluation of airline is refused
with τ²'s reason.
"""

from __future__ import annotations

import itertools
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

import tests.support.llm_server as scripted_openai
from apps.connections.services import ConnectionFields, connection_create
from apps.evaluations.exports import evaluation_export, evaluation_export_tau2
from apps.evaluations.models import Evaluation
from apps.evaluations.services import TaskChoice, evaluation_create
from apps.runs.models import Run
from apps.runs.spec import RunSpec, Side
from tau2_env.engine import catalog
from tau2_env.engine import results as tau2_results
from tau2_env.generations import tau2_generation
from tests.support.evaluations import wait_for_evaluation
from tests.support.llm_server import RecordedRequest, tool_call
from tests.support.scripts import GOLD_TASK, gold_script
from tests.support.tau2_cli import tau2_cli_run

SEED = 300
MAX_STEPS = 20
# Different on each side, so an argument sent to the wrong side shows.
AGENT_ARGS = {"temperature": 0.3, "max_tokens": 512}
USER_ARGS = {"temperature": 0.7}
CLI_KEY = "sk-cli-not-a-key-0001"
CONNECTION_KEY = "sk-connection-not-a-key-0002"
# Telecom's first base task: the customer's phone has airplane mode on and roaming off;
# solved by toggling both (the customer's tools, which the solo agent holds).
TELECOM_TASK = "[mobile_data_issue]airplane_mode_on|user_abroad_roaming_enabled_off[PERSONA:None]"


class _CountingUUIDs:
    """Stands in for the scripted server's ``uuid``: ids count from zero in each play."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._counter = itertools.count(1)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=next(self._counter))


@pytest.fixture
def counted_ids(monkeypatch) -> _CountingUUIDs:
    ids = _CountingUUIDs()
    monkeypatch.setattr(scripted_openai, "uuid", ids)
    return ids


def solo_script(llm) -> None:
    """The solo agent toggles airplane mode, then roaming, then calls τ²'s ``done``."""

    def responder(request: RecordedRequest):
        called = [
            call["function"]["name"]
            for message in request.messages
            if message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
        for step in ("toggle_airplane_mode", "toggle_roaming", "done"):
            if step not in called:
                return tool_call(step)
        raise AssertionError("the solo agent was asked again after done")

    llm.responder = responder


def tau2_run_mode(
    directory: Path,
    *,
    base_url: str,
    domain: str,
    task_id: str,
    agent: str,
    user: str = "user_simulator",
) -> dict[str, Any]:
    """``tau2 run --agent <agent> --user <user>`` of one task, one trial, seed 300, both
    sides on the scripted server with a key from ``OPENAI_API_KEY``: its results file."""
    results = tau2_cli_run(
        directory,
        domain=domain,
        task_ids=[task_id],
        seed=SEED,
        max_steps=MAX_STEPS,
        agent=agent,
        user=user,
        agent_llm="openai/lab-agent-7b",
        user_llm="openai/lab-customer-7b",
        agent_args={**AGENT_ARGS, "api_base": base_url},
        user_args={**USER_ARGS, "api_base": base_url},
        key=CLI_KEY,
        agent_key_variable="OPENAI_API_KEY",
        user_key_variable="OPENAI_API_KEY",
    )
    return json.loads(results.read_text())


def product_evaluation(user, llm, *, domain: str, task_id: str, mode: str) -> Evaluation:
    """The same task, trial and seed evaluated by the product in ``mode``, to its end."""
    lab = connection_create(
        by=user,
        owner=user,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Lab vLLM",
            base_url=llm.base_url,
            api_key=CONNECTION_KEY,
            models=["lab-agent-7b", "lab-customer-7b"],
        ),
    )
    spec = RunSpec(
        agent=Side("lab-agent-7b", lab, dict(AGENT_ARGS)),
        customer=Side("lab-customer-7b", lab, dict(USER_ARGS)),
        seed=SEED,
        max_steps=MAX_STEPS,
        mode=mode,
    )
    evaluation = evaluation_create(
        user=user,
        spec=spec,
        tasks=TaskChoice(domain=domain, task_ids=[task_id]),
        num_trials=1,
    )
    return wait_for_evaluation(evaluation, lambda e: e.is_final)


def bodies(requests) -> list[str]:
    return [json.dumps(r.body) for r in requests]


def assert_same_requests(cli: list[str], ours: list[str]) -> None:
    assert len(ours) == len(cli), (len(cli), len(ours))
    for index, (theirs, mine) in enumerate(zip(cli, ours, strict=True)):
        assert mine == theirs, f"request {index} differs"


def assert_scored_alike(evaluation: Evaluation, results: dict[str, Any]) -> Run:
    (simulation,) = results["simulations"]
    (run,) = evaluation.runs.all()
    assert run.status == Run.Status.COMPLETED, run.error
    assert run.seed == simulation["seed"] == 626729
    assert run.termination_reason == simulation["termination_reason"]
    assert run.reward_info == simulation["reward_info"]
    assert run.reward == simulation["reward_info"]["reward"] == 1.0
    stored = [e.message for e in run.events.order_by("seq")]
    assert [(m["role"], m.get("content"), m.get("tool_calls")) for m in stored] == [
        (m["role"], m.get("content"), m.get("tool_calls")) for m in simulation["messages"]
    ]
    return run


def assert_exported_as_tau2_names_it(evaluation: Evaluation, results: dict[str, Any]) -> None:
    info = evaluation_export_tau2(evaluation)["info"]
    for side in ("agent_info", "user_info"):
        assert info[side]["implementation"] == results["info"][side]["implementation"]
    studio = evaluation_export(evaluation)
    assert studio["mode"] == evaluation.mode
    assert studio["implementations"] == {
        "agent": results["info"]["agent_info"]["implementation"],
        "user": results["info"]["user_info"]["implementation"],
    }


@pytest.mark.slow
@pytest.mark.skipif(
    tau2_generation() != "0.2",
    reason=(
        "τ² 1.0.1's own `tau2 run --agent llm_agent_solo --user dummy_user` fails before the "
        "first episode (build_user passes tools= to DummyUser(): "
        "sierra-research/tau2-bench#486), so there is no run of τ²'s to compare with"
    ),
)
def test_a_no_user_run_sends_what_tau2_run_solo_sends_and_scores_the_same(
    celery_worker, llm_server, counted_ids, alice, tmp_path
):
    solo_script(llm_server)
    results = tau2_run_mode(
        tmp_path,
        base_url=llm_server.base_url,
        domain="telecom",
        task_id=TELECOM_TASK,
        agent="llm_agent_solo",
        user="dummy_user",
    )
    cli = llm_server.chat_requests()
    assert results["info"]["agent_info"]["implementation"] == "llm_agent_solo"
    assert results["info"]["user_info"]["implementation"] == "dummy_user"
    # τ²'s file, read back and scored again in the mode its sides name: τ²'s verdict.
    parsed = tau2_results.read_results(json.dumps(results), max_bytes=50_000_000)
    mode = tau2_results.mode_of(
        agent=parsed.info.agent_info.implementation, user=parsed.info.user_info.implementation
    )
    assert mode == "no_user"
    again = tau2_results.rescore(
        domain="telecom",
        task=parsed.tasks[0],
        simulation=parsed.simulations[0],
        max_steps=MAX_STEPS,
        max_errors=10,
        mode=mode,
    )
    assert again.status == "equal", again.note
    assert again.reward_info == results["simulations"][0]["reward_info"]

    llm_server.requests.clear()
    counted_ids.restart()
    evaluation = product_evaluation(
        alice, llm_server, domain="telecom", task_id=TELECOM_TASK, mode="no_user"
    )
    ours = llm_server.chat_requests()

    assert evaluation.mode == "no_user"
    assert_same_requests(bodies(cli), bodies(ours))
    assert {r.token for r in ours} == {CONNECTION_KEY}
    # What was compared is the solo agent's: the ticket, every tool and τ²'s "done",
    # tool calls required; and nobody played the customer.
    assert len(ours) == 3
    first = ours[0].body
    assert first["tool_choice"] == "required" and first["model"] == "lab-agent-7b"
    assert "<ticket>" in first["messages"][0]["content"]
    assert {"toggle_airplane_mode", "toggle_roaming", "done"} <= set(ours[0].tool_names)
    assert all(r.body["temperature"] == 0.3 for r in ours)
    run = assert_scored_alike(evaluation, results)
    assert run.mode == "no_user"
    assert run.provenance["agent"]["implementation"] == "tau2.agent.llm_agent.LLMSoloAgent"
    assert run.provenance["user"]["implementation"] == "tau2.user.user_simulator.DummyUser"
    assert_exported_as_tau2_names_it(evaluation, results)


@pytest.mark.slow
def test_an_oracle_plan_run_sends_what_tau2_run_gt_sends_and_scores_the_same(
    celery_worker, llm_server, counted_ids, alice, tmp_path
):
    gold_script(llm_server)
    results = tau2_run_mode(
        tmp_path,
        base_url=llm_server.base_url,
        domain=GOLD_TASK[0],
        task_id=GOLD_TASK[1],
        agent="llm_agent_gt",
    )
    cli = llm_server.chat_requests()
    assert results["info"]["agent_info"]["implementation"] == "llm_agent_gt"

    llm_server.requests.clear()
    counted_ids.restart()
    evaluation = product_evaluation(
        alice, llm_server, domain=GOLD_TASK[0], task_id=GOLD_TASK[1], mode="oracle_plan"
    )
    ours = llm_server.chat_requests()

    assert evaluation.mode == "oracle_plan"
    assert_same_requests(bodies(cli), bodies(ours))
    # The agent was given the task's expected actions; the customer was τ²'s simulator.
    agent = [r for r in ours if r.tool_names]
    customer = [r for r in ours if not r.tool_names]
    assert agent and customer
    prompt = agent[0].body["messages"][0]["content"]
    assert "<resolution_steps>" in prompt
    # Every expected action of the installed τ²'s task, as τ²'s GT agent words it.
    expected = catalog.get_tau2_task(*GOLD_TASK).evaluation_criteria.actions
    assert expected
    for action in expected:
        arguments = ", ".join(f"{k}={v}" for k, v in action.arguments.items())
        assert f"{action.name}({arguments})" in prompt
    assert {r.body["temperature"] for r in customer} == {0.7}
    run = assert_scored_alike(evaluation, results)
    assert run.provenance["agent"]["implementation"] == "tau2.agent.llm_agent.LLMGTAgent"
    assert_exported_as_tau2_names_it(evaluation, results)


def test_no_user_is_refused_on_a_domain_tau2_cannot_run_without_a_user(alice, llm_server):
    lab = connection_create(
        by=alice,
        owner=alice,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Lab",
            base_url=llm_server.base_url,
            api_key=CONNECTION_KEY,
            models=["lab-agent-7b"],
        ),
    )
    with pytest.raises(ValidationError) as refused:
        evaluation_create(
            user=alice,
            spec=RunSpec(
                agent=Side("lab-agent-7b", lab), customer=Side("lab-agent-7b", lab), mode="no_user"
            ),
            tasks=TaskChoice(domain="airline", task_ids=["27"]),
        )
    assert refused.value.message_dict["mode"] == [
        "τ²-bench cannot run airline without a user: Airline domain does not support solo mode."
    ]
    assert not Evaluation.objects.exists()


def test_the_form_refuses_no_user_on_airline_with_the_reason(alice, alice_client, llm_server):
    lab = connection_create(
        by=alice,
        owner=alice,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Alice's lab",
            base_url=llm_server.base_url,
            api_key=CONNECTION_KEY,
            models=["lab-agent-7b"],
        ),
    )
    response = alice_client.post(
        "/evaluations/new/",
        {
            "domain": "airline",
            "split": "test",
            "task_ids": "27",
            "agent_model": f"@{lab.slug}/lab-agent-7b",
            "user_model": f"@{lab.slug}/lab-agent-7b",
            "mode": "no_user",
            "num_trials": 1,
            "seed": 300,
            "max_steps": 20,
            "max_errors": 10,
            "concurrency": 1,
        },
    )
    assert response.status_code == 400
    assert "Airline domain does not support solo mode" in response.content.decode()
    assert not Evaluation.objects.exists()


def test_oracle_plan_leaves_out_the_tasks_tau2s_gt_agent_refuses(alice, llm_server):
    from tau2.agent.llm_agent import LLMGTAgent

    from tau2_env.engine import catalog

    refused = [
        t
        for t in catalog.get_domain("airline").splits["test"]
        if not LLMGTAgent.check_valid_task(catalog.get_tau2_task("airline", t))
    ]
    assert refused  # airline's test split has tasks with no expected action
    lab = connection_create(
        by=alice,
        owner=alice,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Lab",
            base_url=llm_server.base_url,
            api_key=CONNECTION_KEY,
            models=["lab-agent-7b"],
        ),
    )
    # Looked at before it commits, then rolled back: never handed to a worker.
    with pytest.raises(_RolledBack), transaction.atomic():
        evaluation = evaluation_create(
            user=alice,
            spec=RunSpec(
                agent=Side("lab-agent-7b", lab),
                customer=Side("lab-agent-7b", lab),
                mode="oracle_plan",
            ),
            tasks=TaskChoice(domain="airline", split="test"),
        )
        assert evaluation.mode == "oracle_plan"
        assert not set(refused) & set(evaluation.task_ids)
        assert evaluation.provenance["mode_left_out"] == refused
        assert set(evaluation.runs.values_list("mode", flat=True)) == {"oracle_plan"}
        assert evaluation.runs.count() == 20 - len(refused)
        raise _RolledBack
    assert not Evaluation.objects.exists()


class _RolledBack(Exception):
    pass


def test_the_mode_is_named_on_the_list_the_page_and_the_api(alice, alice_client):
    from tests.support.evaluations import stored_evaluation

    plain = stored_evaluation(alice, outcomes={"27": [1.0]})
    oracle = stored_evaluation(alice, outcomes={"27": [1.0]}, name="GT run")
    Evaluation.objects.filter(pk=oracle.pk).update(mode="oracle_plan")
    oracle.refresh_from_db()

    assert str(oracle) == "GT run (Oracle plan)" and "(" not in str(plain)
    rows = alice_client.get("/evaluations/").content.decode()
    row = rows[rows.index(f'data-evaluation-id="{oracle.pk}"') :]
    assert 'data-testid="evaluation-mode"' in row[: row.index("</tr>")]
    row = rows[rows.index(f'data-evaluation-id="{plain.pk}"') :]
    assert 'data-testid="evaluation-mode"' not in row[: row.index("</tr>")]
    page = alice_client.get(oracle.get_absolute_url()).content.decode()
    assert "mode Oracle plan (llm_agent_gt + user_simulator)" in page
    assert "<title>GT run (Oracle plan)" in page
    assert alice_client.get(f"/api/evaluations/{oracle.pk}/").json()["mode"] == "oracle_plan"
    listed = alice_client.get("/api/evaluations/").json()
    items = listed["results"] if isinstance(listed, dict) else listed
    assert {e["id"]: e["mode"] for e in items} == {plain.pk: "default", oracle.pk: "oracle_plan"}


def test_a_no_user_conversation_whose_first_call_fails_transiently_opens_afresh(llm_server):
    """τ²'s solo agent speaks first inside τ²'s initialize(): a rate limit there is a hop
    tried again like any, on a conversation built afresh (the task's initial state applied
    once), and τ² scores the solved task 1."""
    from tau2_env.engine import episodes
    from tau2_env.llm import gateway as routes
    from tests.support.llm_server import error

    answered = []
    refusals = routes.RETRIES + 1  # every attempt of the first call: it reaches the engine

    def responder(request: RecordedRequest):
        if len(answered) < refusals:
            answered.append("refused")
            return error(429, "slow down")
        answered.append("answered")
        called = [
            call["function"]["name"]
            for message in request.messages
            if message.get("role") == "assistant"
            for call in message.get("tool_calls") or []
        ]
        for step in ("toggle_airplane_mode", "toggle_roaming", "done"):
            if step not in called:
                return tool_call(step)
        raise AssertionError("asked again after done")

    llm_server.responder = responder
    route = routes.Route(
        provider="openai_compatible",
        model="openai/lab-agent-7b",
        base_url=llm_server.base_url,
        api_key=CONNECTION_KEY,
    )
    episode = episodes.Episode(
        domain="telecom",
        task_id=TELECOM_TASK,
        user_llm=route,
        agent_llm=route,
        mode="no_user",
        seed=SEED,
        max_steps=MAX_STEPS,
    )
    assert episode.messages == [] and not episode.done  # nothing said before run()
    hops, waits = [], []

    def backoff(exc, attempt):
        waits.append((exc.transient, attempt))
        return 0.0

    outcome = episode.run(on_hop=hops.append, backoff=backoff)

    assert outcome == "ended" and episode.error is None
    # The refused call came back to the engine, which waited and opened afresh.
    assert waits == [(True, 1)]
    assert answered == ["refused"] * refusals + ["answered"] * 3
    assert [h.speaker for h in hops] == ["agent", "agent", "agent"]
    assert [m.turn_idx for m in episode.messages] == list(range(len(episode.messages)))
    assert episode.termination_reason == episodes.TerminationReason.AGENT_STOP
    assert episode.reward == 1.0

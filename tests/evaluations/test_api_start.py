"""Starting and controlling evaluations through the JSON API with studio keys.

alice has a key that may read and start, one that may only read, and a revoked one; bob
is on her team; stella (staff) runs the team's connections. Except where a test says it
runs on the Celery worker, every worker slot is taken (``TAU2_EVAL_MAX_IN_FLIGHT=0``):
an evaluation's runs are created and stay queued.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from django.test import Client

from apps.agents.models import ApiKey
from apps.agents.services import api_key_create, api_key_revoke
from apps.evaluations.forms import EvaluationForm
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tests.support import connections as with_connections
from tests.support.connections import openai_compatible_connection
from tests.support.scripts import AGENT_MODEL, gold_script

staff = with_connections.staff
connections_cleared = with_connections.connections_cleared

# The gold script solves airline 27 and never 19 (a cancellation it does not make), on
# τ² 0.2 and 1.0.1 alike.
BODY = {"domain": "airline", "split": "test", "task_ids": ["27", "19"], "num_trials": 2}


@pytest.fixture
def workers_full(settings):
    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0


def key_of(user, scope: str = ApiKey.Scope.START) -> str:
    return api_key_create(user=user, name=f"ci {scope}", scope=scope)[1]


def post(path: str, *, key: str = "", body: dict | None = None, idempotency: str = ""):
    headers = {}
    if key:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    if idempotency:
        headers["HTTP_IDEMPOTENCY_KEY"] = idempotency
    return Client(enforce_csrf_checks=True).post(
        path, data=json.dumps(body or {}), content_type="application/json", **headers
    )


def get(path: str, *, key: str):
    return Client().get(path, HTTP_AUTHORIZATION=f"Bearer {key}")


def start(key: str, **body):
    return post("/api/evaluations/", key=key, body={**BODY, "agent_model": AGENT_MODEL, **body})


def test_a_key_that_may_start_starts_an_evaluation_once_and_reads_its_results(
    celery_worker, llm_server, alice
):
    gold_script(llm_server)  # solves airline/27; on task 19 the same moves are wrong
    key = key_of(alice)
    body = {**BODY, "agent_model": AGENT_MODEL, "seed": 300, "name": "nightly"}

    first = post("/api/evaluations/", key=key, body=body, idempotency="build-41")
    again = post("/api/evaluations/", key=key, body=body, idempotency="build-41")

    assert first.status_code == 201, first.content.decode()
    pk = first.json()["id"]
    assert first["Location"] == f"/api/evaluations/{pk}/"
    assert again.status_code == 200 and again.json()["id"] == pk  # not a second one
    assert Evaluation.objects.count() == 1
    evaluation = Evaluation.objects.get()
    assert evaluation.created_by == alice and evaluation.name == "nightly"
    assert evaluation.runs.count() == 4 and evaluation.agent_model == AGENT_MODEL

    deadline = time.monotonic() + 120
    while (data := get(f"/api/evaluations/{pk}/", key=key).json())["status"] != "completed":
        assert time.monotonic() < deadline, data["status"]
        time.sleep(0.3)
    assert data["metrics"]["completed"] == 4
    assert data["pass_hat_ks"] == {"1": 0.5, "2": 0.5}  # 27 always, 19 never
    assert data["pass_hat_k_intervals"] == {"1": [0.0, 1.0], "2": [0.0, 1.0]}  # two tasks
    assert "total_cost_usd" in data["metrics"] and "cost_usd" in data["metrics"]
    assert data["downloads"]["tau2_results"].endswith(f"/evaluations/{pk}.json?format=tau2")
    assert data["breakdowns"] and "ci95" in data["breakdowns"][0]["groups"][0]
    listed = get("/api/evaluations/?mine=1", key=key).json()
    assert [row["id"] for row in listed["results"]] == [pk]
    # The same key on another body is refused, naming what it started; nothing starts.
    other = {**body, "num_trials": 1}
    third = post("/api/evaluations/", key=key, body=other, idempotency="build-41")
    assert third.status_code == 422
    assert third.json()["evaluation"] == pk and Evaluation.objects.count() == 1
    assert f"started evaluation {pk} with another request body" in str(third.json())


def test_a_read_only_key_reads_and_is_refused_a_start_saying_why(alice, workers_full):
    key = key_of(alice, ApiKey.Scope.READ)

    response = start(key)

    assert response.status_code == 403
    assert "may only read" in response.json()["detail"]
    assert not Evaluation.objects.exists()
    assert get("/api/evaluations/", key=key).status_code == 200


def test_a_revoked_key_is_refused_with_401(alice, workers_full):
    key, raw = api_key_create(user=alice, name="old")
    api_key_revoke(user=alice, pk=key.pk)

    response = start(raw)

    assert response.status_code == 401
    assert response.json()["detail"] == "This API key was revoked."
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert get("/api/evaluations/", key=raw).status_code == 401
    assert not Evaluation.objects.exists()


def test_without_a_key_or_a_session_a_start_is_refused(committed_db, workers_full):
    response = post("/api/evaluations/", body={**BODY, "agent_model": AGENT_MODEL})
    assert response.status_code == 403 and not Evaluation.objects.exists()


def test_a_connection_alice_may_not_use_is_refused_with_the_forms_message(
    staff, alice, bob, llm_server, workers_full
):
    vllm = openai_compatible_connection(
        llm_server, by=staff, name="Bob's vLLM", access="named", allowed_users=[bob]
    )
    model = f"@{vllm.slug}/{vllm.models.first().name}"
    form = EvaluationForm({**BODY, "task_ids": "27 19", "agent_model": model}, user=alice)
    form.is_valid()

    response = start(key_of(alice), agent_model=model)

    assert response.status_code == 400
    assert response.json()["agent_model"] == form.errors["agent_model"]
    assert not Evaluation.objects.exists()
    assert start(key_of(bob), agent_model=model).status_code == 201  # bob may


def test_a_budget_too_small_is_refused_before_anything_is_stored(
    staff, alice, llm_server, workers_full
):
    vllm = openai_compatible_connection(
        llm_server,
        by=staff,
        name="Team vLLM",
        models=[("scripted-agent", (Decimal("1"), Decimal("2")))],
        monthly_budget_usd=Decimal("0.0001"),
    )

    response = start(key_of(alice), agent_model=f"@{vllm.slug}/scripted-agent")

    assert response.status_code == 400
    message = " ".join(response.json()["agent_model"])  # as the form shows it, by the field
    assert "Raise the budget" in message and "this evaluation's 4 runs" in message, message
    assert not Evaluation.objects.exists() and not Run.objects.exists()


def test_a_bad_form_answers_with_the_forms_messages(alice, workers_full):
    response = start(key_of(alice), num_trials=99, task_ids=["no-such-task"])

    assert response.status_code == 400
    errors = response.json()
    assert errors["task_ids"] == ["No task no-such-task in airline."]
    assert "num_trials" in errors and not Evaluation.objects.exists()


def test_alice_pauses_resumes_stops_and_retries_with_her_key_and_bob_may_not(
    alice, bob, workers_full
):
    key = key_of(alice)
    pk = start(key).json()["id"]
    base = f"/api/evaluations/{pk}"

    assert post(f"{base}/pause/", key=key_of(bob)).status_code == 403
    assert post(f"{base}/pause/", key=key_of(alice, ApiKey.Scope.READ)).status_code == 403
    assert post(f"{base}/pause/", key=key).json()["status"] == "paused"
    assert post(f"{base}/resume/", key=key).json()["status"] == "running"
    stopped = post(f"{base}/stop/", key=key).json()
    assert stopped["status"] == "stopped"
    assert set(Run.objects.filter(evaluation_id=pk).values_list("status", flat=True)) == {
        Run.Status.STOPPED
    }
    retried = post(f"{base}/retry/", key=key).json()
    assert retried["queued"] == 0 and retried["id"] == pk


def test_the_schema_documents_starting_and_the_key(client, committed_db):
    schema = client.get("/api/schema/?format=json").json()
    assert "post" in schema["paths"]["/api/evaluations/"]
    for action in ("pause", "resume", "stop", "retry"):
        assert "post" in schema["paths"][f"/api/evaluations/{{id}}/{action}/"]
    assert schema["components"]["securitySchemes"]["studioKey"]["scheme"] == "bearer"
    parameters = schema["paths"]["/api/evaluations/"]["post"]["parameters"]
    assert any(p["name"] == "Idempotency-Key" and p["in"] == "header" for p in parameters)

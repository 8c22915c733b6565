"""The history page and the JSON API of evaluations, as alice, bob and charlie see them.

alice and bob are signed in (the team); charlie is anonymous: refused unless the
team's runs are public (``TAU2_PUBLIC_RUNS``), like the runs themselves.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings

from apps.evaluations import selectors
from tests.support.evaluations import stored_evaluation
from tests.support.people import ALICE_TOKEN


@pytest.fixture
def evaluations(alice, bob):
    return {
        "alice airline": stored_evaluation(
            alice, agent_model="org/agent-a", outcomes={"27": [1, 0], "2": [0, 0]}, split=""
        ),
        "bob airline": stored_evaluation(
            bob,
            agent_model="org/agent-b",
            status="imported",
            outcomes={"27": [1, 1]},
            split="",
        ),
        "alice retail": stored_evaluation(
            alice, agent_model="org/agent-a", domain="retail", outcomes={"5": [1]}, split=""
        ),
    }


def listed(client: Client, query: str = "") -> set[int]:
    html = client.get(f"/evaluations/?{query}").content.decode()
    return {int(pk) for pk in re.findall(r'data-evaluation-id="(\d+)"', html)}


def test_the_history_lists_the_teams_evaluations_with_filters(alice_client, evaluations):
    a, b, r = (e.pk for e in evaluations.values())

    assert listed(alice_client) == {a, b, r}
    assert listed(alice_client, "domain=retail") == {r}
    assert listed(alice_client, "model=agent-b") == {b}
    assert listed(alice_client, "status=imported") == {b}
    assert listed(alice_client, "mine=1") == {a, r}
    assert listed(alice_client, "domain=airline&mine=1") == {a}


def test_the_history_shows_metrics_downloads_and_the_ways_to_start(alice_client, evaluations):
    page = alice_client.get("/evaluations/").content.decode()

    a = evaluations["alice airline"]
    row = page.split(f'data-evaluation-id="{a.pk}"')[1].split("</tr>")[0]
    assert 'data-testid="pass-1">0.250<' in row  # (0.5 + 0) / 2
    assert f"/evaluations/{a.pk}.json?format=tau2" in row and f"/evaluations/{a.pk}.csv" in row
    assert 'href="/evaluations/new/"' in page and 'href="/evaluations/import/"' in page
    assert "Import a tau2 run file" in page and ALICE_TOKEN not in page


def test_the_history_is_paginated(alice, alice_client):
    for _ in range(27):
        stored_evaluation(alice, outcomes={"27": [1]}, split="")
    first = alice_client.get("/evaluations/").content.decode()
    assert first.count('data-testid="evaluation-row"') == 25 and "Page 1 of 2" in first
    second = alice_client.get("/evaluations/?page=2").content.decode()
    assert second.count('data-testid="evaluation-row"') == 2


def test_the_api_lists_evaluations_with_their_pass_hat_k(alice_client, evaluations):
    response = alice_client.get("/api/evaluations/")

    assert response.status_code == 200
    data = response.json()
    assert data["count"] == 3
    by_id = {row["id"]: row for row in data["results"]}
    a = evaluations["alice airline"]
    row = by_id[a.pk]
    assert row["agent_model"] == "org/agent-a" and row["status"] == "completed"
    assert row["pass_hat_ks"] == {"1": 0.25, "2": 0.0} and row["runs"] == 4
    assert row["started_by"] == "alice" and row["num_trials"] == 2
    assert row["url"] == f"http://testserver/api/evaluations/{a.pk}/"
    assert row["page"] == f"http://testserver/evaluations/{a.pk}/"
    only = alice_client.get("/api/evaluations/?domain=retail&mine=true").json()
    assert [r["id"] for r in only["results"]] == [evaluations["alice retail"].pk]
    assert alice_client.get("/api/evaluations/?status=imported").json()["count"] == 1


def test_the_api_detail_has_metrics_computed_now_and_no_secrets(bob_client, evaluations):
    a = evaluations["alice airline"]
    a.provenance["agent_args"] = {"api_key": "sk-not-for-you", "temperature": 0}
    a.save(update_fields=["provenance"])

    response = bob_client.get(f"/api/evaluations/{a.pk}/")

    assert response.status_code == 200
    assert "sk-not-for-you" not in response.content.decode()
    data = response.json()
    metrics = selectors.evaluation_metrics(a)
    assert data["metrics"]["pass_hat_ks"] == metrics["pass_hat_ks"] == {"1": 0.25, "2": 0.0}
    assert data["metrics"]["completed"] == 4 and data["task_ids"] == ["27", "2"]
    assert data["trial_seeds"] == a.trial_seeds and data["provenance"]["agent_args"] == {
        "temperature": 0
    }
    assert data["downloads"]["tau2_results"].endswith(f"/evaluations/{a.pk}.json?format=tau2")
    assert bob_client.get("/api/evaluations/999999/").status_code == 404


def test_the_openapi_schema_describes_the_evaluation_endpoints(committed_db):
    response = Client().get("/api/schema/?format=json")

    assert response.status_code == 200
    schema = response.json()
    assert "/api/evaluations/" in schema["paths"]
    assert "/api/evaluations/{id}/" in schema["paths"]
    parameters = {p["name"] for p in schema["paths"]["/api/evaluations/"]["get"]["parameters"]}
    assert {"domain", "model", "status", "mine"} <= parameters


def test_charlie_is_refused_unless_runs_are_public(evaluations):
    charlie = Client()
    pk = evaluations["alice airline"].pk

    assert charlie.get("/api/evaluations/").status_code == 403
    assert charlie.get(f"/api/evaluations/{pk}/").status_code == 403
    history = charlie.get("/evaluations/")
    assert history.status_code == 302 and "/accounts/sign-in/" in history["Location"]
    with override_settings(TAU2_PUBLIC_RUNS=True):
        assert charlie.get("/api/evaluations/").json()["count"] == 3
        assert charlie.get(f"/api/evaluations/{pk}/").status_code == 200
        assert listed(charlie) == {e.pk for e in evaluations.values()}
        # "Only mine" means nothing to an anonymous visitor.
        assert listed(charlie, "mine=1") == {e.pk for e in evaluations.values()}

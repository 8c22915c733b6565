"""The read-only JSON API and its OpenAPI schema."""

import pytest

pytestmark = pytest.mark.django_db


def test_domains_list_their_splits(client, catalogue):
    data = client.get("/api/domains/").json()
    telecom = next(d for d in data if d["name"] == "telecom")
    assert {"name": "full", "size": 2285} in telecom["splits"]


def test_a_domain_has_its_policy_and_tools(client, catalogue):
    data = client.get("/api/domains/airline/").json()
    assert data["policy"].startswith("# Airline Agent Policy")
    tools = {t["name"]: t for t in data["tools"]}
    assert tools["book_reservation"]["kind"] == "write"
    assert tools["book_reservation"]["schema"]["function"]["parameters"]


def test_tasks_take_the_explorers_filters(client, catalogue):
    data = client.get(
        "/api/tasks/",
        {"domain": "telecom", "split": "full", "q": "roaming", "kind": "write", "limit": 5},
    ).json()
    assert 0 < data["count"] < 2285
    assert len(data["results"]) == 5
    for task in data["results"]:
        assert task["changes_db"] is True
        assert task["domain"] == "telecom"


def test_tasks_default_to_the_configured_domain_and_split(client, catalogue):
    assert client.get("/api/tasks/").json()["count"] == 20


def test_one_task_carries_its_hidden_scenario_and_criteria(client, catalogue):
    data = client.get("/api/tasks/retail/5/").json()
    assert data["known_info"] == "You are mei_kovacs_8020 in zipcode 28236."
    assert set(data["splits"]) == {"test", "base"}
    assert len(data["evaluation_criteria"]["actions"]) == 5
    assert client.get("/api/tasks/retail/nope/").status_code == 404


def test_the_api_is_described_by_openapi(client, catalogue):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert schema["openapi"].startswith("3.")
    assert {"/api/tasks/", "/api/domains/", "/api/tasks/{domain}/{task_id}/"} <= set(
        schema["paths"]
    )
    params = {p["name"] for p in schema["paths"]["/api/tasks/"]["get"]["parameters"]}
    assert {"domain", "split", "q", "kind"} <= params


def test_the_api_is_read_only(client, catalogue):
    assert client.post("/api/tasks/", {}).status_code in (403, 405)
    assert client.delete("/api/tasks/retail/5/").status_code in (403, 405)

"""Studio API keys: alice creates and revokes them on /accounts/keys/; a key is shown once
and kept hashed; on the OpenEnv and MCP faces a key runs the customer on its owner's
vault token, a revoked or unknown one is refused, and TAU2_AGENT_API_REQUIRE_KEY refuses
anonymous clients without ever spending the server's HF_TOKEN."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone
from websockets.asyncio.client import connect

from apps.agents.credentials import KEY_REQUIRED, install
from apps.agents.models import ApiKey
from apps.agents.services import ApiKeyRefused, api_key_create, api_key_resolve, api_key_revoke
from tau2_env.gate import access
from tests.support.agents import agent_runs_of
from tests.support.llm_server import text
from tests.support.mcp_client import INITIALIZE, MCP_HEADERS
from tests.support.people import ALICE_TOKEN, BOB_TOKEN, person, signed_in

SERVER_TOKEN = "hf_server_token_never_for_strangers_9999"


# The suite's people, committed, so that the live server sees them and their vault
# (this folder's conftest has signed-in people of its own, in a test transaction).
@pytest.fixture
def alice(committed_db):
    return person("alice", ALICE_TOKEN)


@pytest.fixture
def bob(committed_db):
    return person("bob", BOB_TOKEN)


@pytest.fixture
def alice_client(alice):
    return signed_in(alice)


@pytest.fixture
def bob_client(bob):
    return signed_in(bob)


@pytest.fixture(autouse=True)
def studio_keys():
    """The project's resolver (AgentsConfig.ready installs it; other suites' fixtures
    may have put the default back)."""
    install()


def _everything_in_the_database() -> str:
    """Every row of every table of the test database (committed: the people here are),
    as PostgreSQL's own dump prints it — Django's models and anything else there."""
    db = connection.settings_dict
    result = subprocess.run(
        [
            "pg_dump",
            "--data-only",
            "--no-owner",
            "-h",
            db["HOST"],
            "-p",
            str(db["PORT"]),
            "-U",
            db["USER"],
            db["NAME"],
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PGPASSWORD": db["PASSWORD"] or ""},
    )
    assert "accounts_apikey" in result.stdout  # the keys' own table is in what is searched
    return result.stdout


# --- the profile page -----------------------------------------------------------------


def test_alice_creates_a_key_that_is_shown_once_and_kept_only_hashed(alice, alice_client):
    response = alice_client.post("/accounts/keys/", {"name": "my RL trainer"}, follow=True)

    # POST/redirect/GET: the key is on the page the redirect lands on, and a reload of
    # that page posts nothing again (the walk made a second key by reloading).
    assert response.redirect_chain == [("/accounts/keys/", 302)]
    assert response.status_code == 200
    assert response["Cache-Control"] == "no-store"
    page = response.content.decode()
    key = ApiKey.objects.get(user=alice)
    raw = response.context["created_key"]
    assert raw.startswith(f"tau2s_{key.key_id}_") and len(raw) > 50
    assert page.count(raw) == 1 and 'data-testid="key-created"' in page
    everything = _everything_in_the_database()
    assert raw not in everything  # the session holds it sealed until the page shows it
    assert raw.split("_", 2)[2] not in everything

    again = alice_client.get("/accounts/keys/").content.decode()
    assert raw not in again and 'data-testid="key-created"' not in again
    assert f"tau2s_{key.key_id}_…" in again and "my RL trainer" in again and "never" in again
    assert "<script>" not in again  # CSP: no inline scripts


def test_a_key_needs_a_name(alice, alice_client):
    response = alice_client.post("/accounts/keys/", {"name": "   "})

    assert response.status_code == 400
    assert 'data-testid="key-error"' in response.content.decode()
    assert not ApiKey.objects.filter(user=alice).exists()


def test_the_header_links_the_signed_in_person_to_their_keys(alice_client):
    page = alice_client.get("/tasks/").content.decode()

    assert '<a class="account-link" href="/accounts/keys/"' in page


def test_anonymous_visitors_are_sent_to_sign_in(client):
    response = client.get("/accounts/keys/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/sign-in/?")


def test_alice_revokes_her_key_and_it_is_refused_from_then_on(alice, alice_client):
    key, raw = api_key_create(user=alice, name="ci")
    assert api_key_resolve(raw=raw).user == alice

    response = alice_client.post(f"/accounts/keys/{key.pk}/revoke/")

    assert response.status_code == 302
    key.refresh_from_db()
    assert key.revoked_at is not None
    with pytest.raises(ApiKeyRefused, match="revoked"):
        api_key_resolve(raw=raw)
    page = alice_client.get("/accounts/keys/").content.decode()
    assert 'data-testid="key-revoke"' not in page and "revoked" in page


def test_a_new_key_is_shown_whole_with_a_copy_button_and_revoke_asks_first(alice, alice_client):
    response = alice_client.post("/accounts/keys/", {"name": "ci"}, follow=True)

    page = response.content.decode()
    raw = response.context["created_key"]
    assert '<button type="button" data-copy="#new-key"' in page
    # The whole key, underscores and all, as the element's text (what Copy copies).
    assert f'id="new-key" aria-label="Your new API key" data-testid="key-value">{raw}</pre>' in page
    assert 'data-confirm="Revoke the key “ci”?' in page


# --- a key's own cap of sessions at once ----------------------------------------------


def test_alice_gives_a_trainers_key_a_cap_of_its_own_when_she_makes_it(
    alice, alice_client, settings
):
    response = alice_client.post(
        "/accounts/keys/", {"name": "grpo", "max_sessions": "64"}, follow=True
    )
    plain = api_key_create(user=alice, name="notebook")[1]

    key = ApiKey.objects.get(user=alice, name="grpo")
    assert response.status_code == 200 and key.max_sessions == 64
    raw = response.context["created_key"]
    trainer = access.resolve_credentials(access.ClientRequest(hf_token=raw))
    shared = access.resolve_credentials(access.ClientRequest(hf_token=plain))
    # Its sessions count against its own 64; the other key shares alice's default.
    assert (trainer.client, trainer.limit) == (f"key:{key.key_id}", 64)
    assert (shared.client, shared.limit) == (f"person:{alice.pk}", None)
    page = alice_client.get("/accounts/keys/").content.decode()
    assert 'data-testid="key-cap">64</td>' in page
    assert f"{settings.TAU2_SESSIONS_PER_CLIENT}, shared" in page


def test_alice_makes_a_read_only_key_that_the_faces_refuse_and_keys_may_start_by_default(
    alice, alice_client
):
    response = alice_client.post(
        "/accounts/keys/", {"name": "dashboard", "scope": "read"}, follow=True
    )
    older = alice_client.post(
        "/accounts/keys/", {"name": "trainer"}, follow=True
    )  # no scope: as before

    reader = ApiKey.objects.get(user=alice, name="dashboard")
    assert response.status_code == 200 and reader.scope == ApiKey.Scope.READ
    assert ApiKey.objects.get(user=alice, name="trainer").scope == ApiKey.Scope.START
    assert older.status_code == 200
    with pytest.raises(access.CredentialsRefused, match="may only read"):
        access.resolve_credentials(access.ClientRequest(hf_token=response.context["created_key"]))
    player = access.resolve_credentials(access.ClientRequest(hf_token=older.context["created_key"]))
    assert player.client == f"person:{alice.pk}"
    page = alice_client.get("/accounts/keys/").content.decode()
    assert 'data-testid="key-scope-shown">read only</td>' in page
    assert 'data-testid="key-scope-shown">read and start</td>' in page
    refused = alice_client.post("/accounts/keys/", {"name": "x", "scope": "admin"})
    assert refused.status_code == 400 and not ApiKey.objects.filter(name="x").exists()


def test_a_keys_cap_is_bounded_by_the_servers_maximum(alice, alice_client, settings):
    settings.TAU2_SESSIONS_PER_KEY_MAX = 100

    over = alice_client.post("/accounts/keys/", {"name": "big", "max_sessions": "101"})
    zero = alice_client.post("/accounts/keys/", {"name": "none", "max_sessions": "0"})
    words = alice_client.post("/accounts/keys/", {"name": "odd", "max_sessions": "many"})
    most = alice_client.post(
        "/accounts/keys/", {"name": "most", "max_sessions": "100"}, follow=True
    )

    for refused in (over, zero, words):
        assert refused.status_code == 400
        page = refused.content.decode()
        assert 'data-testid="key-sessions-error"' in page and "from 1 to 100" in page
    assert most.status_code == 200
    assert list(ApiKey.objects.filter(user=alice).values_list("name", "max_sessions")) == [
        ("most", 100)
    ]
    with pytest.raises(ValidationError, match="from 1 to 100"):
        api_key_create(user=alice, name="direct", max_sessions=101)
    # The table itself refuses a cap below 1.
    with pytest.raises(IntegrityError), transaction.atomic():
        ApiKey.objects.filter(user=alice).update(max_sessions=0)


def test_bob_cannot_revoke_alices_key(alice, bob_client):
    key, raw = api_key_create(user=alice, name="ci")

    assert bob_client.post(f"/accounts/keys/{key.pk}/revoke/").status_code == 404
    assert api_key_resolve(raw=raw).revoked_at is None


def test_last_use_is_written_at_most_once_a_minute(alice):
    key, raw = api_key_create(user=alice, name="ci")
    assert key.last_used_at is None

    first = api_key_resolve(raw=raw).last_used_at
    stored = ApiKey.objects.get(pk=key.pk).last_used_at
    assert first is not None and stored == first
    api_key_resolve(raw=raw)
    assert ApiKey.objects.get(pk=key.pk).last_used_at == first  # within the minute

    ApiKey.objects.filter(pk=key.pk).update(last_used_at=first - timedelta(minutes=2))
    api_key_resolve(raw=raw)
    assert ApiKey.objects.get(pk=key.pk).last_used_at > first - timedelta(seconds=1)
    assert ApiKey.objects.get(pk=key.pk).last_used_at <= timezone.now()


def test_a_key_with_a_wrong_secret_or_unknown_id_is_refused(alice):
    key, raw = api_key_create(user=alice, name="ci")

    for wrong in (raw[:-1] + ("A" if raw[-1] != "A" else "B"), "tau2s_000000000000_x", "tau2s_"):
        with pytest.raises(ApiKeyRefused, match="Unknown API key"):
            api_key_resolve(raw=wrong)
    api_key_revoke(user=alice, pk=key.pk)


def test_the_project_installs_its_resolver_at_start():
    code = (
        "import django; django.setup();"
        "from tau2_env.gate import access;"
        "from apps.agents.credentials import studio_credentials;"
        "print(access._resolver is studio_credentials)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.stdout.strip().endswith("True"), result.stderr[-2000:]


# --- on the agent faces (a live uvicorn serving the project's ASGI app) ---------------


async def _refusals(asgi_server, headers: dict[str, str], *, hf_token=None) -> dict:
    body = {"task_id": "2", **({"hf_token": hf_token} if hf_token else {})}
    async with httpx.AsyncClient(base_url=asgi_server.url, headers=headers, timeout=30) as http:
        reset = await http.post("/reset", json=body)
        mcp = await http.post("/agent/mcp", headers=MCP_HEADERS, json=INITIALIZE)
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        frame = json.loads(await ws.recv())
    return {"reset": reset, "mcp": mcp, "ws": frame}


async def test_a_revoked_or_unknown_key_is_refused_on_mcp_and_openenv(
    asgi_server, llm_server, alice
):
    key, raw = await sync_to_async(api_key_create)(user=alice, name="ci")
    await sync_to_async(api_key_revoke)(user=alice, pk=key.pk)

    for presented, reason in ((raw, "This API key was revoked."), ("tau2s_abc_def", "Unknown")):
        seen = await _refusals(asgi_server, {"Authorization": f"Bearer {presented}"})
        assert seen["reset"].status_code == 401
        assert seen["reset"].json()["detail"].startswith(reason)
        assert seen["mcp"].status_code == 401
        assert seen["mcp"].json()["error"]["message"].startswith(reason)
        assert seen["ws"]["type"] == "error"
        assert seen["ws"]["data"]["message"].startswith(reason)
    # A key given as the reset's hf_token is a key too, never sent on as a token.
    async with httpx.AsyncClient(base_url=asgi_server.url, timeout=30) as http:
        reset = await http.post("/reset", json={"task_id": "2", "hf_token": raw})
    assert reset.status_code == 401 and reset.json()["detail"] == "This API key was revoked."
    assert llm_server.chat_requests() == []


async def test_requiring_a_key_refuses_anonymous_clients_and_never_spends_the_server_token(
    asgi_server, llm_server, alice, settings, monkeypatch
):
    settings.TAU2_AGENT_API_REQUIRE_KEY = True
    monkeypatch.setenv("HF_TOKEN", SERVER_TOKEN)
    llm_server.add(text("Hi, I need help."))

    for headers, hf_token in (({}, None), ({"Authorization": "Bearer hf_someone_elses"}, None)):
        seen = await _refusals(asgi_server, headers, hf_token=hf_token)
        assert seen["reset"].status_code == 401
        assert seen["reset"].json()["detail"] == KEY_REQUIRED
        assert seen["mcp"].status_code == 401
        assert seen["mcp"].json()["error"]["message"] == KEY_REQUIRED
        assert seen["ws"]["data"]["message"] == KEY_REQUIRED
    seen = await _refusals(asgi_server, {}, hf_token="hf_own_token_given_in_reset")
    assert seen["reset"].status_code == 401
    assert llm_server.chat_requests() == []  # nothing was spent, least of all HF_TOKEN

    _, raw = await sync_to_async(api_key_create)(user=alice, name="ci")
    async with httpx.AsyncClient(
        base_url=asgi_server.url, headers={"Authorization": f"Bearer {raw}"}, timeout=60
    ) as http:
        reset = await http.post("/reset", json={"task_id": "2"})
    assert reset.status_code == 200, reset.text
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}
    assert ALICE_TOKEN not in reset.text and raw not in reset.text
    await sync_to_async(agent_runs_of)(alice)  # its episode's run, ended with the request


async def test_alices_key_never_serves_bob(asgi_server, llm_server, alice, bob):
    _, alice_raw = await sync_to_async(api_key_create)(user=alice, name="a")
    _, bob_raw = await sync_to_async(api_key_create)(user=bob, name="b")

    tokens = {}
    for raw, owner in ((alice_raw, "alice"), (bob_raw, "bob")):
        llm_server.reset()
        llm_server.add(text("Hi, I need help."))
        async with httpx.AsyncClient(
            base_url=asgi_server.url, headers={"Authorization": f"Bearer {raw}"}, timeout=60
        ) as http:
            assert (await http.post("/reset", json={"task_id": "2"})).status_code == 200
        tokens[owner] = {r.token for r in llm_server.chat_requests()}

    assert tokens == {"alice": {ALICE_TOKEN}, "bob": {BOB_TOKEN}}
    assert len(await sync_to_async(agent_runs_of)(alice)) == 1
    assert len(await sync_to_async(agent_runs_of)(bob)) == 1

"""The Connections pages: stella (staff) adds a team connection to an OpenAI-compatible
endpoint (the scripted server), reads its models and tests it; alice and bob (members)
see the team connections they may use and add personal ones nobody else sees; keys are
sealed, shown as a hint only, rotated and wiped — and never in a page, the admin or a
log. One Chromium test does it all in a browser.
"""

from __future__ import annotations

import logging
import os
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.test import Client
from playwright.sync_api import expect

from apps.accounts import crypto
from apps.connections.llm_routes import ConnectionUnavailable, route_for
from apps.connections.models import Connection
from apps.connections.services import (
    ConnectionFields,
    ModelsReadError,
    connection_create,
    models_read,
)
from tests.browser.conftest import CHROMIUM_ARGS, chromium_path
from tests.support import connections as support
from tests.support.browser import page_signed_in_as
from tests.support.connections import CONNECTION_KEY, CONNECTION_MODEL, openai_compatible_connection
from tests.support.llm_server import text, tool_call
from tests.support.review import stored_run

NEW_KEY = "sk-conn-ROTATED-55aa0c1d9e8f7b62"
HEADER_SECRET = "hdr-CANARY-3e9f1a7c55d2"
OUR_MODELS = {"object": "list", "data": [{"id": CONNECTION_MODEL}, {"id": "our-other-model"}]}


# stella (staff), and no team connection left from another test (they outlive the people
# committed_db deletes).
staff, staff_client, connections_cleared = (
    support.staff,
    support.staff_client,
    support.connections_cleared,
)
pytestmark = pytest.mark.usefixtures("connections_cleared")


def secrets_in(text: str) -> list[str]:
    """The suite's secrets found in ``text``: whole, or their distinctive middles."""
    found = []
    for secret in (CONNECTION_KEY, NEW_KEY, HEADER_SECRET):
        middle = secret.split("-", 2)[2]
        if secret in text or middle in text:
            found.append(secret)
    return found


def add_form(llm, **overrides) -> dict:
    form = {
        "scope": "team",
        "kind": "openai_compatible",
        "name": "Our vLLM",
        "base_url": llm.base_url,
        "api_key": CONNECTION_KEY,
        "models": f"{CONNECTION_MODEL}\nour-other-model 0.20 0.80",
        "access": "everyone",
        "action": "save",
    }
    form.update(overrides)
    return {k: v for k, v in form.items() if v is not None}


def edit_form(connection: Connection, **overrides) -> dict:
    form = {
        "name": connection.name,
        "base_url": connection.base_url,
        "api_key": "",
        "models": "\n".join(connection.models.values_list("name", flat=True)),
        "access": connection.access,
        "action": "save",
    }
    form.update(overrides)
    return {k: v for k, v in form.items() if v is not None}


# ------------------------------------------------------------------- adding, seeing


def test_staff_add_an_openai_compatible_connection_through_the_pages(staff_client, llm_server):
    response = staff_client.post("/connections/new/", add_form(llm_server))

    connection = Connection.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/connections/{connection.pk}/"
    assert connection.is_team and connection.kind == "openai_compatible"
    assert connection.slug == "our-vllm" and connection.base_url == llm_server.base_url
    assert crypto.unseal(connection.api_key_enc) == CONNECTION_KEY
    assert connection.key_hint == "…5f36"
    priced = {m.name: (m.prices, m.price_source) for m in connection.models.all()}
    assert priced == {
        CONNECTION_MODEL: (None, ""),  # an own endpoint's model: unpriced, never $0
        "our-other-model": ((Decimal("0.20"), Decimal("0.80")), "entered"),
    }

    page = staff_client.get("/connections/").content.decode()
    assert "Our vLLM" in page and f"127.0.0.1:{llm_server.port}" in page
    assert "$0.20 / $0.80 per 1M" in page and "unpriced" in page and "$0.00" not in page
    assert "…5f36" in page and "everyone signed in" in page and "not tested yet" in page
    detail = staff_client.get(f"/connections/{connection.pk}/").content.decode()
    assert f"@our-vllm/{CONNECTION_MODEL}" in detail and 'data-testid="test"' in detail
    assert 'data-testid="connection-spend"' in detail  # the budgets' panel (apps.runs)


def test_reading_the_models_lists_what_the_endpoint_serves_with_the_key_typed(
    staff_client, llm_server
):
    llm_server.catalogue = OUR_MODELS
    form = add_form(llm_server, models="", action="read_models")
    response = staff_client.post("/connections/new/", form, headers={"HX-Request": "true"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html  # the fragment only: the key stays in the form's field
    assert html.count('data-testid="listed-model"') == 2 and "checked" in html
    assert CONNECTION_MODEL in html and "our-other-model" in html
    (listing,) = [r for r in llm_server.requests if r.path == "/v1/models"]
    assert listing.authorization == f"Bearer {CONNECTION_KEY}"
    assert not Connection.objects.exists()  # nothing saved by reading

    # The ticked ones are offered once saved, with the typed ones.
    form = add_form(llm_server, models="typed-model", listed_models=[CONNECTION_MODEL])
    assert staff_client.post("/connections/new/", form).status_code == 302
    names = set(Connection.objects.get().models.values_list("name", flat=True))
    assert names == {"typed-model", CONNECTION_MODEL}


def test_reading_the_models_says_why_it_could_not(staff_client, llm_server):
    llm_server.catalogue = "<html>a login page</html>"
    form = add_form(llm_server, action="read_models")
    html = staff_client.post("/connections/new/", form, headers={"HX-Request": "true"})
    assert "not JSON (text/html)" in html.content.decode()

    form = add_form(llm_server, base_url=f"http://127.0.0.1:{llm_server.port}/nowhere")
    form["action"] = "read_models"
    html = staff_client.post("/connections/new/", form, headers={"HX-Request": "true"})
    assert "has no list of models at /nowhere/models (HTTP 404)" in html.content.decode()


def test_editing_reads_the_models_with_the_stored_key_unless_a_new_one_is_typed(
    staff, staff_client, llm_server
):
    connection = openai_compatible_connection(llm_server, by=staff)
    llm_server.catalogue = OUR_MODELS
    edit = f"/connections/{connection.pk}/edit/"
    form = edit_form(connection, action="read_models")
    html = staff_client.post(edit, form, headers={"HX-Request": "true"}).content.decode()
    # Only what is not offered yet is listed (our-finetune-7b is).
    assert html.count('data-testid="listed-model"') == 1 and "our-other-model" in html
    form = edit_form(connection, action="read_models", api_key=NEW_KEY)
    staff_client.post(edit, form, headers={"HX-Request": "true"})
    listings = [r.token for r in llm_server.requests if r.path == "/v1/models"]
    assert listings == [CONNECTION_KEY, NEW_KEY]
    connection.refresh_from_db()
    assert crypto.unseal(connection.api_key_enc) == CONNECTION_KEY  # reading saved nothing


def test_without_htmx_reading_the_models_shows_the_form_again_asking_for_the_key(
    staff_client, llm_server
):
    llm_server.catalogue = OUR_MODELS
    form = add_form(
        llm_server, action="read_models", models="", headers=f"X-Org-Id: {HEADER_SECRET}"
    )
    html = staff_client.post("/connections/new/", form).content.decode()
    assert "<html" in html and html.count('data-testid="listed-model"') == 2
    assert "Type the API key and the extra headers again" in html and not secrets_in(html)


GENERATES = "supportedGenerationMethods"


@pytest.mark.parametrize(
    ("kind", "payload", "names"),
    [
        (
            "openai",
            {"object": "list", "data": [{"id": "o3"}, {"id": "gpt-4.1"}]},
            ["gpt-4.1", "o3"],
        ),
        ("together", [{"id": "meta-llama/Llama-3-8b", "type": "chat"}], ["meta-llama/Llama-3-8b"]),
        (  # what generates content, without "models/"
            "gemini",
            {
                "models": [
                    {"name": "models/gemini-2.5-flash", GENERATES: ["generateContent"]},
                    {"name": "models/text-embedding-004", GENERATES: ["embedContent"]},
                ]
            },
            ["gemini-2.5-flash"],
        ),
    ],
)
def test_the_model_lists_of_each_kind_are_read(llm_server, kind, payload, names):
    llm_server.catalogue = payload
    found = models_read(kind=kind, base_url=llm_server.base_url, api_key="sk-some-key-0123")
    assert found == names
    (listing,) = llm_server.requests
    headers = {k.lower(): v for k, v in listing.headers.items()}
    if kind == "gemini":
        assert headers["x-goog-api-key"] == "sk-some-key-0123" and "authorization" not in headers
    else:
        assert listing.token == "sk-some-key-0123"


def test_a_list_that_is_not_of_models_is_said(llm_server):
    llm_server.catalogue = {"error": "nope"}
    with pytest.raises(ModelsReadError, match="not with a list of models"):
        models_read(kind="openai", base_url=llm_server.base_url, api_key="sk-some-key-0123")


def test_an_anthropic_connection_reads_its_models_the_anthropic_way(staff_client, llm_server):
    llm_server.catalogue = {"data": [{"id": "claude-sonnet-4-5", "type": "model"}]}
    form = add_form(
        llm_server,
        kind="anthropic",
        base_url=f"http://127.0.0.1:{llm_server.port}",
        api_key="sk-ant-test-0123456789",
        action="read_models",
    )
    html = staff_client.post("/connections/new/", form, headers={"HX-Request": "true"})

    assert "claude-sonnet-4-5" in html.content.decode()
    (listing,) = [r for r in llm_server.requests if r.path == "/v1/models"]
    headers = {k.lower(): v for k, v in listing.headers.items()}
    assert headers["x-api-key"] == "sk-ant-test-0123456789"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers


def test_the_base_url_placeholder_is_the_kinds_default(staff_client, settings):
    settings.TAU2_PROVIDER_URLS = {
        **settings.TAU2_PROVIDER_URLS,
        "mistral": "https://mistral.test/v1",
    }
    html = staff_client.get("/connections/base-url/?kind=mistral&base_url=").content.decode()
    assert 'placeholder="https://mistral.test/v1"' in html and " required" not in html
    html = staff_client.get("/connections/base-url/?kind=openai_compatible").content.decode()
    assert " required" in html
    page = staff_client.get("/connections/new/").content.decode()
    assert f'placeholder="{settings.TAU2_PROVIDER_URLS["openai"]}"' in page


@pytest.mark.parametrize(
    ("overrides", "field_error"),
    [
        ({"base_url": ""}, "An OpenAI-compatible endpoint needs its base URL."),
        ({"kind": "openai", "base_url": "", "api_key": ""}, "OpenAI needs an API key."),
        ({"base_url": "http://host:8000/v1?api_key=abc"}, "not in the URL"),
        ({"base_url": "ftp://host/v1"}, "Enter the endpoint&#x27;s URL"),
        ({"monthly_budget_usd": "-1"}, "greater than or equal to 0"),
        ({"person_monthly_budget_usd": "-0.01"}, "greater than or equal to 0"),
        ({"max_in_flight": "0"}, "greater than or equal to 1"),
        ({"headers": "X-Org-Id value"}, "Line 1: write one header per line as Name: value."),
        ({"models": "our-model 0.2"}, "Line 1: write the model&#x27;s name"),
        ({"models": "our-model -1 2"}, "Line 1: a price cannot be negative."),
    ],
)
def test_the_form_refuses_what_no_connection_may_have(
    staff_client, llm_server, overrides, field_error
):
    response = staff_client.post("/connections/new/", add_form(llm_server, **overrides))
    assert response.status_code == 400
    assert field_error in response.content.decode()
    assert not Connection.objects.exists()


def test_an_openai_compatible_endpoint_may_have_no_key(staff_client, llm_server):
    response = staff_client.post("/connections/new/", add_form(llm_server, api_key=""))
    assert response.status_code == 302
    connection = Connection.objects.get()
    assert connection.api_key_enc == "" and connection.key_hint == ""
    assert "no key" in staff_client.get("/connections/").content.decode()


def test_charlie_is_sent_to_sign_in(llm_server, committed_db):
    for path in ("/connections/", "/connections/new/"):
        response = Client().get(path)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/")


# ------------------------------------------------------------------------ who sees what


def test_a_member_adds_a_personal_connection_only(alice, alice_client, llm_server):
    response = alice_client.post("/connections/new/", add_form(llm_server, name="Alice's"))
    connection = Connection.objects.get()
    assert response.status_code == 302
    assert connection.owner == alice  # "scope": "team" is not hers to choose
    page = alice_client.get("/connections/new/").content.decode()
    assert 'name="scope"' not in page and 'name="access"' not in page
    assert 'name="monthly_budget_usd"' not in page
    with pytest.raises(ValidationError, match="Only staff add team connections"):
        connection_create(
            by=alice,
            kind="openai",
            fields=ConnectionFields(name="Sneaky", api_key="sk-x" * 4),
        )
    assert "only you" in alice_client.get("/connections/").content.decode()


def test_a_member_cannot_change_a_team_connection(staff, alice_client, llm_server):
    team = openai_compatible_connection(llm_server, by=staff)
    assert alice_client.get(f"/connections/{team.pk}/").status_code == 200  # she may use it
    assert alice_client.get(f"/connections/{team.pk}/edit/").status_code == 403
    assert alice_client.post(f"/connections/{team.pk}/edit/", edit_form(team)).status_code == 403
    assert alice_client.get(f"/connections/{team.pk}/delete/").status_code == 403
    assert alice_client.post(f"/connections/{team.pk}/delete/").status_code == 403
    page = alice_client.get(f"/connections/{team.pk}/").content.decode()
    assert 'data-testid="edit"' not in page and 'data-testid="delete"' not in page
    team.refresh_from_db()
    assert not team.is_deleted and team.api_key_enc


def test_nobody_sees_another_persons_personal_connection(
    alice, bob, alice_client, bob_client, staff_client, llm_server
):
    bobs = openai_compatible_connection(llm_server, by=bob, owner=bob, name="Bob's own")
    assert "Bob&#x27;s own" in bob_client.get("/connections/").content.decode()
    for client in (alice_client, staff_client):
        assert "Bob" not in client.get("/connections/").content.decode()
        for path in ("", "edit/", "delete/"):
            assert client.get(f"/connections/{bobs.pk}/{path}").status_code == 404
        assert client.post(f"/connections/{bobs.pk}/test/", {"model": "x"}).status_code == 404
        assert client.post(f"/connections/{bobs.pk}/delete/").status_code == 404
    bobs.refresh_from_db()
    assert not bobs.is_deleted


def test_staff_name_who_may_use_a_team_connection(
    staff, staff_client, alice, bob, alice_client, bob_client, llm_server
):
    team = openai_compatible_connection(llm_server, by=staff, name="Small endpoint")
    form = edit_form(team, access="named", allowed_users=[str(bob.pk)], max_in_flight="2")
    assert staff_client.post(f"/connections/{team.pk}/edit/", form).status_code == 302
    team.refresh_from_db()
    assert team.access == "named" and list(team.allowed_users.all()) == [bob]
    assert team.max_in_flight == 2

    assert "Small endpoint" in bob_client.get("/connections/").content.decode()
    assert bob_client.get(f"/connections/{team.pk}/").status_code == 200
    assert "staff and bob" in bob_client.get(f"/connections/{team.pk}/").content.decode()
    assert "Small endpoint" not in alice_client.get("/connections/").content.decode()
    assert alice_client.get(f"/connections/{team.pk}/").status_code == 404
    assert alice_client.post(f"/connections/{team.pk}/test/", {"model": "x"}).status_code == 404

    form = edit_form(team, access="staff")
    assert staff_client.post(f"/connections/{team.pk}/edit/", form).status_code == 302
    assert bob_client.get(f"/connections/{team.pk}/").status_code == 404
    assert "Small endpoint" in staff_client.get("/connections/").content.decode()


def test_staff_set_budgets_and_a_limit_and_the_pages_show_them(staff_client, llm_server):
    form = add_form(
        llm_server, monthly_budget_usd="250", person_monthly_budget_usd="40.50", max_in_flight="4"
    )
    assert staff_client.post("/connections/new/", form).status_code == 302
    connection = Connection.objects.get()
    assert (connection.monthly_budget_usd, connection.person_monthly_budget_usd) == (250, 40.5)
    assert connection.max_in_flight == 4
    page = staff_client.get(f"/connections/{connection.pk}/").content.decode()
    assert "$250.00 for everyone" in page and "$40.50 per person" in page and "at most 4" in page

    # Emptied: no budget, no limit.
    form = edit_form(connection, monthly_budget_usd="", person_monthly_budget_usd="")
    assert staff_client.post(f"/connections/{connection.pk}/edit/", form).status_code == 302
    connection.refresh_from_db()
    assert connection.monthly_budget_usd is None and connection.max_in_flight is None


# ----------------------------------------------------------------------- keys and deleting


def test_rotating_the_key_changes_the_key_the_endpoint_receives(staff, staff_client, llm_server):
    connection = openai_compatible_connection(llm_server, by=staff)
    llm_server.add(tool_call("report_connection_test", status="ok"))
    staff_client.post(f"/connections/{connection.pk}/test/", {"model": CONNECTION_MODEL})

    # Saved with the key field empty: the key stays.
    form = edit_form(connection, name="Our vLLM (renamed)")
    assert staff_client.post(f"/connections/{connection.pk}/edit/", form).status_code == 302
    connection.refresh_from_db()
    assert crypto.unseal(connection.api_key_enc) == CONNECTION_KEY
    assert connection.key_rotated_at is None and connection.slug == "our-vllm"

    edit = staff_client.get(f"/connections/{connection.pk}/edit/").content.decode()
    assert "…5f36" in edit and 'type="password"' in edit and not secrets_in(edit)
    form = edit_form(connection, api_key=NEW_KEY)
    assert staff_client.post(f"/connections/{connection.pk}/edit/", form).status_code == 302
    connection.refresh_from_db()
    assert connection.key_hint == "…7b62" and connection.key_rotated_at is not None

    llm_server.add(tool_call("report_connection_test", status="ok"))
    staff_client.post(f"/connections/{connection.pk}/test/", {"model": CONNECTION_MODEL})
    tokens = [r.token for r in llm_server.chat_requests()]
    assert tokens == [CONNECTION_KEY, NEW_KEY]


def test_editing_replaces_the_headers_and_the_models(staff, staff_client, llm_server):
    connection = openai_compatible_connection(
        llm_server, by=staff, headers={"X-Org-Id": HEADER_SECRET}
    )
    edit = staff_client.get(f"/connections/{connection.pk}/edit/").content.decode()
    assert "X-Org-Id" in edit and not secrets_in(edit)

    form = edit_form(connection, models="fresh-model 1 2")  # headers left empty: kept
    assert staff_client.post(f"/connections/{connection.pk}/edit/", form).status_code == 302
    route = route_for(connection=connection, model="fresh-model", user=staff)
    assert dict(route.extra_headers) == {"X-Org-Id": HEADER_SECRET}
    assert list(connection.models.values_list("name", flat=True)) == ["fresh-model"]

    form = edit_form(connection, models="fresh-model 1 2", clear_headers="on")
    assert staff_client.post(f"/connections/{connection.pk}/edit/", form).status_code == 302
    connection.refresh_from_db()
    assert connection.headers_enc == "" and connection.header_names == []


def test_deleting_wipes_the_key_and_keeps_the_row_its_runs_name(staff, staff_client, llm_server):
    connection = openai_compatible_connection(
        llm_server, by=staff, headers={"X-Org-Id": HEADER_SECRET}
    )
    run = stored_run(staff)
    run.agent_connection = connection
    run.save(update_fields=["agent_connection"])

    page = staff_client.get(f"/connections/{connection.pk}/delete/").content.decode()
    assert "keep naming it" in page and "wiped" in page and "will fail" in page
    response = staff_client.post(f"/connections/{connection.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == "/connections/"

    connection.refresh_from_db()
    assert connection.deleted_at is not None
    assert connection.api_key_enc == "" and connection.headers_enc == ""
    run.refresh_from_db()
    assert run.agent_connection_id == connection.pk
    listed = staff_client.get("/connections/").content.decode()
    assert "is deleted and its key wiped" in listed and 'data-slug="our-vllm"' not in listed
    assert staff_client.get(f"/connections/{connection.pk}/").status_code == 404
    with pytest.raises(ConnectionUnavailable, match="was deleted"):
        route_for(connection=connection, model=CONNECTION_MODEL, user=staff)


def test_the_key_is_in_no_page_no_admin_page_and_no_log(staff, staff_client, llm_server, caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="LiteLLM")  # litellm's own level is higher
    llm_server.catalogue = OUR_MODELS
    llm_server.add(tool_call("report_connection_test", status="ok"), text("no tool"))
    form = add_form(llm_server, headers=f"X-Org-Id: {HEADER_SECRET}")
    pages = [staff_client.post("/connections/new/", {**form, "action": "read_models"})]
    pages.append(staff_client.post("/connections/new/", form, follow=True))
    connection = Connection.objects.get()
    model = connection.models.first()
    for _ in range(2):  # works, then no tool calling
        pages.append(
            staff_client.post(
                f"/connections/{connection.pk}/test/",
                {"model": CONNECTION_MODEL},
                headers={"HX-Request": "true"},
            )
        )
    edit = f"/connections/{connection.pk}/edit/"
    pages.append(staff_client.post(edit, edit_form(connection, api_key=NEW_KEY), follow=True))
    for path in (
        "/connections/",
        f"/connections/{connection.pk}/",
        edit,
        f"/connections/{connection.pk}/delete/",
        "/admin/connections/connection/",
        f"/admin/connections/connection/{connection.pk}/change/",
        "/admin/connections/connectionmodel/",
        f"/admin/connections/connectionmodel/{model.pk}/change/",
    ):
        pages.append(staff_client.get(path))
    for response in pages:
        assert response.status_code == 200, response
        assert not secrets_in(response.content.decode()), response
    admin = staff_client.get(f"/admin/connections/connection/{connection.pk}/change/")
    assert "…7b62" in admin.content.decode() and "api_key_enc" not in admin.content.decode()
    assert [r for r in llm_server.chat_requests() if r.token == CONNECTION_KEY]

    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    assert "report_connection_test" in logged  # litellm did log the calls at DEBUG…
    for key in (CONNECTION_KEY, NEW_KEY):  # …never with a key
        assert key not in logged and key.split("-", 2)[2] not in logged


# --------------------------------------------------------------------------- in Chromium


# Chromium as tests/browser launches it, for the one browser test of this module.
@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": chromium_path(),
        "args": CHROMIUM_ARGS,
        "headless": True,
    }


@pytest.fixture(scope="session")
def base_url(asgi_server):
    return asgi_server.url


@pytest.fixture(scope="session")
def before_playwright(asgi_server):
    """The server up before Playwright starts its event loop in the main thread, and
    Django's ORM allowed there from then on (browser tests run last: tests/conftest.py),
    as tests/browser/conftest.py does for its own tests."""
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    return asgi_server


@pytest.mark.browser
@pytest.mark.slow
def test_in_chromium_staff_add_a_connection_read_its_models_and_test_it(
    before_playwright, page, staff, base_url, llm_server
):
    llm_server.catalogue = OUR_MODELS
    llm_server.responder = lambda request: tool_call("report_connection_test", status="ok")
    page_signed_in_as(page, staff, base_url)
    page.set_default_timeout(15_000)
    page.goto("/connections/")
    page.get_by_test_id("add-team").click()

    page.get_by_test_id("kind").select_option("openai_compatible")
    expect(page.get_by_test_id("base-url")).to_have_attribute("required", "")
    page.get_by_label("Name", exact=True).fill("Our vLLM")
    page.get_by_test_id("base-url").fill(llm_server.base_url)
    page.get_by_label("API key", exact=True).fill(CONNECTION_KEY)
    page.get_by_test_id("read-models").click()
    expect(page.get_by_test_id("listed-model")).to_have_count(2)
    expect(page.get_by_label("API key", exact=True)).to_have_value(
        CONNECTION_KEY
    )  # the form stayed
    page.get_by_test_id("save").click()

    expect(page.locator("h1")).to_have_text("Our vLLM")
    expect(page.get_by_test_id("model-row")).to_have_count(2)
    page.get_by_test_id("test-model").select_option(CONNECTION_MODEL)
    page.get_by_test_id("test").click()
    expect(page.get_by_test_id("test-kind")).to_have_text("works")
    expect(page.get_by_test_id("test-message")).to_contain_text("called the tool")
    assert CONNECTION_KEY not in page.content()
    connection = Connection.objects.get()
    assert connection.last_test["kind"] == "works" and get_user_model().objects.count() == 1

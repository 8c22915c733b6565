"""The Test button against the scripted server, litellm real on the wire: each outcome in
words, kept as the connection's last_test, never with the key, never retried.

stella (staff) tests a team connection to an OpenAI-compatible endpoint; the server
answers a tool call (works), text (no tool calling), 400 about tools, 401, 403, 404, 429,
500, a slow reply beyond the Test's timeout, a body that is not JSON (a tiny http.server
here), or nothing at all (a closed port, a host that does not exist).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.connections.models import Connection
from apps.connections.probe import TEST_MAX_TOKENS, TEST_TOOL, TOOL_NAME, connection_test
from apps.connections.services import connection_delete
from tests.support import connections as support
from tests.support.connections import CONNECTION_KEY, CONNECTION_MODEL, openai_compatible_connection
from tests.support.llm_server import delayed, error, text, tool_call
from tests.support.processes import free_port

# stella (staff), and no team connection left from another test.
staff, staff_client, connections_cleared = (
    support.staff,
    support.staff_client,
    support.connections_cleared,
)


@pytest.fixture
def connection(staff, llm_server) -> Connection:
    return openai_compatible_connection(llm_server, by=staff)


def tested(connection, staff, *, model=CONNECTION_MODEL):
    """The Test's outcome, once checked to be kept and key-free."""
    outcome = connection_test(connection=connection, model=model, user=staff)
    connection.refresh_from_db()
    assert connection.last_test == outcome.as_json()  # kept as it was said
    assert CONNECTION_KEY not in outcome.message
    return outcome


def test_a_model_that_calls_the_tool_works(connection, staff, llm_server):
    llm_server.add(tool_call(TOOL_NAME, status="ok"))
    outcome = tested(connection, staff)

    assert (outcome.ok, outcome.kind, outcome.tool_called) == (True, "works", True)
    assert "called the tool it was given" in outcome.message
    assert outcome.model == CONNECTION_MODEL and outcome.at and outcome.seconds is not None
    (request,) = llm_server.chat_requests()
    assert request.token == CONNECTION_KEY
    assert request.body["model"] == CONNECTION_MODEL
    assert request.body["tools"] == [TEST_TOOL] and request.body["tool_choice"] == "auto"
    assert request.body["temperature"] == 0 and request.body["max_tokens"] == TEST_MAX_TOKENS


def test_it_goes_through_the_connections_own_headers(staff, llm_server):
    connection = openai_compatible_connection(llm_server, by=staff, headers={"X-Org-Id": "org-42"})
    llm_server.add(tool_call(TOOL_NAME, status="ok"))
    assert tested(connection, staff).kind == "works"
    (request,) = llm_server.chat_requests()
    assert {k.lower(): v for k, v in request.headers.items()}["x-org-id"] == "org-42"


def test_a_model_that_answers_text_instead_has_no_tool_calling(connection, staff, llm_server):
    llm_server.add(text("Sure! The status is ok."))
    outcome = tested(connection, staff)

    assert (outcome.ok, outcome.kind, outcome.tool_called) == (False, "no_tool_calling", False)
    assert "without calling the tool" in outcome.message
    assert "The status is ok." in outcome.message and "--enable-auto-tool-choice" in outcome.message


def test_a_provider_that_refuses_tools_has_no_tool_calling(connection, staff, llm_server):
    llm_server.add(
        error(400, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser')
    )
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "no_tool_calling")
    assert "HTTP 400" in outcome.message and "tool-call-parser" in outcome.message


@pytest.mark.parametrize(
    ("status", "said"),
    [
        (401, "refused the key (HTTP 401): check it, or rotate it (Edit)."),
        (403, "may not call 'our-finetune-7b' (HTTP 403)"),
    ],
)
def test_a_refused_key_is_said_without_the_key(connection, staff, llm_server, status, said):
    # Even when the provider quotes the key back.
    llm_server.add(error(status, f"Incorrect API key provided: {CONNECTION_KEY}"))
    outcome = tested(connection, staff)

    assert (outcome.ok, outcome.kind) == (False, "refused_key")
    assert said in outcome.message
    assert CONNECTION_KEY not in outcome.message and "[redacted]" in outcome.message
    assert len(llm_server.chat_requests()) == 1  # never retried: it will never work


def test_a_refused_connection_without_a_key_is_told_to_add_one(staff, llm_server):
    connection = openai_compatible_connection(llm_server, by=staff, api_key="")
    llm_server.add(error(401, "missing bearer token"))
    outcome = tested(connection, staff)
    assert outcome.kind == "refused_key" and "this connection has no key" in outcome.message
    (request,) = llm_server.chat_requests()
    assert request.token == "no-key"  # never a server-side key from the environment


def test_an_unknown_model_is_said(connection, staff, llm_server):
    llm_server.add(error(404, "The model `nope` does not exist"))
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "unknown_model")
    assert "does not know the model 'our-finetune-7b' (HTTP 404)" in outcome.message
    assert len(llm_server.chat_requests()) == 1


def test_a_rate_limit_is_said_and_not_retried(connection, staff, llm_server):
    llm_server.add(error(429, "Rate limit reached"), tool_call(TOOL_NAME, status="ok"))
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "rate_limited")
    assert "HTTP 429" in outcome.message and "Wait a minute" in outcome.message
    assert len(llm_server.chat_requests()) == 1  # the Test says what happens now


def test_a_providers_failure_is_said(connection, staff, llm_server):
    llm_server.add(error(503, "overloaded"))
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "provider_error")
    assert "HTTP 503" in outcome.message and "try again later" in outcome.message


def test_a_slow_reply_beyond_the_tests_timeout_is_a_timeout(
    connection, staff, llm_server, settings
):
    settings.TAU2_CONNECTION_TEST_TIMEOUT = 1
    llm_server.add(delayed(tool_call(TOOL_NAME, status="ok"), 4))
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "timeout")
    assert "no answer within 1 s from the endpoint of the connection 'Our vLLM'" in outcome.message
    assert len(llm_server.chat_requests()) == 1  # not waited for twice


def test_a_closed_port_is_unreachable(staff, llm_server):
    connection = openai_compatible_connection(llm_server, by=staff)
    Connection.objects.filter(pk=connection.pk).update(
        base_url=f"http://127.0.0.1:{free_port()}/v1"
    )
    connection.refresh_from_db()
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "unreachable")
    assert "refused the connection" in outcome.message


def test_a_host_that_does_not_exist_is_unreachable(staff, llm_server):
    connection = openai_compatible_connection(llm_server, by=staff)
    Connection.objects.filter(pk=connection.pk).update(base_url="http://no-such-host.invalid/v1")
    connection.refresh_from_db()
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "unreachable")
    assert "no-such-host.invalid) could not be found (no such host)" in outcome.message


class _HTMLPage(BaseHTTPRequestHandler):
    """What a proxy or a login page answers: 200, an HTML page."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        page = b"<html><body>Please sign in</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format, *args):  # noqa: A002 - quiet
        return


@pytest.fixture
def html_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HTMLPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_a_reply_that_is_not_json_is_said(staff, llm_server, html_server):
    connection = openai_compatible_connection(llm_server, by=staff)
    Connection.objects.filter(pk=connection.pk).update(base_url=html_server)
    connection.refresh_from_db()
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "not_json"), outcome.message
    assert "answered with an HTML page" in outcome.message and "base URL" in outcome.message


def test_a_deleted_connection_is_unavailable_and_calls_nobody(connection, staff, llm_server):
    connection_delete(connection=connection, by=staff)
    outcome = tested(connection, staff)
    assert (outcome.ok, outcome.kind) == (False, "unavailable")
    assert "was deleted" in outcome.message
    assert llm_server.chat_requests() == []


def test_the_test_button_shows_the_outcome_in_words(connection, staff_client, llm_server):
    llm_server.add(error(401, "invalid key"))
    url = f"/connections/{connection.pk}/test/"
    response = staff_client.post(url, {"model": CONNECTION_MODEL}, headers={"HX-Request": "true"})

    html = response.content.decode()
    assert response.status_code == 200 and "<html" not in html
    assert 'data-kind="refused_key"' in html and ">refused key<" in html
    assert "refused the key (HTTP 401)" in html
    # Without htmx: back to the connection's page, which says it too.
    llm_server.add(tool_call(TOOL_NAME, status="ok"))
    response = staff_client.post(url, {"model": CONNECTION_MODEL})
    assert response.status_code == 302
    page = staff_client.get(response["Location"]).content.decode()
    assert 'data-kind="works"' in page
    assert 'data-kind="works"' in staff_client.get("/connections/").content.decode()
    assert staff_client.post(url, {"model": "not-offered"}).status_code == 400

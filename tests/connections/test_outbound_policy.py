"""Connections and the outbound policy, as a member meets it on the pages: a base URL at
a private, loopback, link-local or metadata address is refused in words; reading the
models and the Test go only where the policy allows, never show what an endpoint that
is not a model server answered, and end within their timeout.

alice is a member adding her own connection; stella (staff) tests a team one. The
misbehaving endpoints are :class:`HostileEndpoint`s on loopback (refused unless
``TAU2_OUTBOUND_ALLOW`` names it: the suite's setting does, so the tests of the default
remove it).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from apps.connections.models import Connection
from apps.connections.probe import connection_test
from apps.connections.services import (
    ConnectionFields,
    ModelsReadError,
    connection_create,
    models_read,
)
from tests.support import connections as support
from tests.support.connections import CONNECTION_KEY, CONNECTION_MODEL
from tests.support.hostile_endpoint import Behaviour, HostileEndpoint

staff, staff_client, connections_cleared = (
    support.staff,
    support.staff_client,
    support.connections_cleared,
)

PROBED_URLS = [
    "http://10.0.0.5:8000/v1",
    "http://172.16.3.4/v1",
    "http://192.168.0.10:11434/v1",
    "http://169.254.169.254/latest/meta-data",
    "http://[fd00::1]:8000/v1",
    "http://metadata.google.internal/computeMetadata/v1",
    "http://0.0.0.0:6379",
    "http://127.0.0.1:5432",
]


@pytest.fixture
def no_allow_list(monkeypatch):
    monkeypatch.delenv("TAU2_OUTBOUND_ALLOW", raising=False)


@pytest.fixture
def endpoint():
    with HostileEndpoint() as served:
        yield served


def _form(url: str, **overrides) -> dict:
    form = {
        "kind": "openai_compatible",
        "name": "Mine",
        "base_url": url,
        "api_key": CONNECTION_KEY,
        "models": CONNECTION_MODEL,
        "action": "save",
    }
    form.update(overrides)
    return form


@pytest.mark.parametrize("url", PROBED_URLS)
def test_alice_cannot_save_a_connection_to_an_internal_address(
    alice, alice_client, no_allow_list, url
):
    response = alice_client.post("/connections/new/", _form(url))

    assert response.status_code == 400  # the form again, with the reason
    page = response.content.decode()
    assert "does not call private, loopback, link-local or metadata addresses" in page
    assert not Connection.objects.exists()


def test_an_address_the_operator_allows_is_accepted(alice, alice_client, monkeypatch):
    monkeypatch.setenv("TAU2_OUTBOUND_ALLOW", "10.0.0.0/8")

    response = alice_client.post("/connections/new/", _form("http://10.0.0.5:8000/v1"))

    assert response.status_code == 302
    assert Connection.objects.get().base_url == "http://10.0.0.5:8000/v1"


def test_reading_models_from_an_internal_address_is_refused_before_any_request(
    no_allow_list, endpoint
):
    endpoint.behaviour = Behaviour("json", payload={"data": [{"id": "m"}]})

    with pytest.raises(ModelsReadError, match="loopback address"):
        models_read(kind="openai_compatible", base_url=endpoint.base_url, api_key="k")

    assert endpoint.requests == 0


def test_reading_models_never_shows_what_another_service_answered(endpoint):
    # An internal JSON service whose answer happens to have a "data" list of ids.
    endpoint.behaviour = Behaviour(
        "json",
        payload={"data": [{"id": "root password is hunter2"}, {"id": "<script>x</script>"}]},
    )

    with pytest.raises(ModelsReadError) as refused:
        models_read(kind="openai_compatible", base_url=endpoint.base_url, api_key="k")

    assert "hunter2" not in str(refused.value) and "script" not in str(refused.value)
    assert "looks like a model's name" in str(refused.value)


def test_reading_models_keeps_only_model_names(endpoint):
    endpoint.behaviour = Behaviour(
        "json", payload={"data": [{"id": "org/model-7b:fast"}, {"id": "no such\nname"}]}
    )
    names = models_read(kind="openai_compatible", base_url=endpoint.base_url, api_key="k")
    assert names == ["org/model-7b:fast"]


def test_a_closed_port_and_another_protocol_read_the_same():
    closed = HostileEndpoint()
    closed.close()
    said = []
    for base in (closed.base_url, f"http://127.0.0.1:{_raw_port()}/v1"):
        with pytest.raises(ModelsReadError) as failed:
            models_read(kind="openai_compatible", base_url=base, api_key="k")
        said.append(str(failed.value).split(" could not", 1)[1])
    assert said[0] == said[1]


def _raw_port() -> int:
    """A port where something that is not HTTP answers (a line of text, then closes)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"-ERR unknown command\r\n")
        server.close()

    threading.Thread(target=answer, daemon=True).start()
    return server.getsockname()[1]


# ------------------------------------------------------------------------ the Test


def _team_connection(staff, endpoint: HostileEndpoint) -> Connection:
    return connection_create(
        by=staff,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Hostile",
            base_url=endpoint.base_url,
            api_key=CONNECTION_KEY,
            models=[CONNECTION_MODEL],
        ),
    )


def test_the_test_of_a_trickling_endpoint_ends_at_its_timeout(staff, endpoint, settings):
    settings.TAU2_CONNECTION_TEST_TIMEOUT = 2
    endpoint.behaviour = Behaviour("trickle", interval=0.5)
    connection = _team_connection(staff, endpoint)

    started = time.monotonic()
    outcome = connection_test(connection=connection, model=CONNECTION_MODEL, user=staff)

    assert time.monotonic() - started < 2 + 2.5  # one poll and a loaded machine's margin
    assert (outcome.ok, outcome.kind) == (False, "timeout")
    assert "did not finish its answer in time" in outcome.message


def test_the_test_of_a_huge_answer_stops_at_the_cap(staff, endpoint, monkeypatch):
    monkeypatch.setenv("TAU2_LLM_MAX_REPLY_BYTES", str(1024 * 1024))
    endpoint.behaviour = Behaviour("huge", size=300 * 1024 * 1024)
    connection = _team_connection(staff, endpoint)

    outcome = connection_test(connection=connection, model=CONNECTION_MODEL, user=staff)

    assert (outcome.ok, outcome.kind) == (False, "too_large")


def test_the_test_never_shows_the_keys_of_what_it_was_answered(staff, endpoint):
    endpoint.behaviour = Behaviour("json", payload={"internal_admin_token": "x", "choices": "n"})
    connection = _team_connection(staff, endpoint)

    outcome = connection_test(connection=connection, model=CONNECTION_MODEL, user=staff)

    assert outcome.kind == "not_json"
    assert "internal_admin_token" not in outcome.message and "Raw keys" not in outcome.message


def test_the_test_of_an_internal_address_says_it_is_not_allowed(
    staff, endpoint, no_allow_list, monkeypatch
):
    monkeypatch.setenv("TAU2_OUTBOUND_ALLOW", "127.0.0.0/8")
    connection = _team_connection(staff, endpoint)  # saved while it was allowed
    monkeypatch.delenv("TAU2_OUTBOUND_ALLOW")

    outcome = connection_test(connection=connection, model=CONNECTION_MODEL, user=staff)

    assert (outcome.ok, outcome.kind) == (False, "not_allowed")
    assert "loopback address" in outcome.message
    assert endpoint.requests == 0

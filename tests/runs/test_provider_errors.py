"""Provider errors named for what happened, with what to do, and never a secret.

Every call goes through ``tau2_env.llm.gateway`` and real litellm: to the scripted server
answering a status code, to a closed local port (refused), or to a server that answers
too late. A model run that meets a refused router ends failed with the reason on its
page, never stuck running.
"""

from __future__ import annotations

import socket

import pytest

from apps.runs.models import Run
from apps.runs.runner import run_execute
from tau2_env.llm import gateway
from tests.runs.conftest import ALICE_TOKEN
from tests.support.llm_server import delayed, error, text
from tests.support.scripts import queued_run

TOKEN = "hf_visitor_token_0123456789"


def _closed_port() -> int:
    """A local port nobody listens on: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _call(route: gateway.Route) -> gateway.LLMCallError:
    with gateway.conversation(user=route), pytest.raises(gateway.LLMCallError) as caught:
        gateway.routed_completion(messages=[{"role": "user", "content": "Hello"}])
    return caught.value


@pytest.mark.parametrize(
    ("status", "kind", "words", "transient"),
    [
        (401, "unauthorized", "Hugging Face token was rejected. Sign out and sign in again", False),
        (402, "no_credits", "no credits left (HTTP 402): add credits", False),
        (403, "forbidden", "may not call this model (HTTP 403)", False),
        (404, "unknown_model", "model 'org/model' was not found (HTTP 404): choose one", False),
        (429, "rate_limited", "rate limited (HTTP 429), still after retries: wait", True),
        (503, "provider_error", "the provider failed (HTTP 503): usually temporary", True),
    ],
)
def test_a_status_code_is_named_with_what_to_do(llm_server, status, kind, words, transient):
    llm_server.responder = lambda request: error(status, f"upstream refuses {TOKEN}")

    failure = _call(gateway.hf_route(model="org/model", token=TOKEN))

    assert failure.kind == kind
    assert failure.transient is transient
    assert failure.status_code == status
    assert words in str(failure)
    assert str(failure).startswith("hf:org/model failed: ")
    assert TOKEN not in str(failure)


def test_401_and_402_are_asked_once(llm_server):
    for status in (401, 402):
        llm_server.reset()
        llm_server.responder = lambda request, status=status: error(status)
        _call(gateway.hf_route(model="org/model", token=TOKEN))
        assert len(llm_server.chat_requests()) == 1


def test_a_refused_connection_names_the_router_and_its_setting(monkeypatch):
    port = _closed_port()
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", f"http://127.0.0.1:{port}/v1?api_key={TOKEN}")

    failure = _call(gateway.hf_route(model="org/model", token=TOKEN))

    assert failure.kind == "unreachable"
    assert failure.transient is True  # a router restarting comes back: worth a retry
    assert f"the router at http://127.0.0.1:{port} refused the connection" in str(failure)
    assert "is TAU2_HF_ROUTER_URL right" in str(failure)
    assert "InternalServerError" not in str(failure) and "HTTP 500" not in str(failure)
    assert TOKEN not in str(failure) and "api_key" not in str(failure)


def test_an_unknown_host_is_named_as_such(monkeypatch):
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", "http://no-such-router.invalid/v1")

    failure = _call(gateway.hf_route(model="org/model", token=TOKEN))

    assert failure.kind == "unreachable"
    assert "could not be found (no such host)" in str(failure)


def test_a_call_without_an_answer_times_out_with_the_wait_named(llm_server):
    llm_server.responder = lambda request: delayed(text("too late"), 5)
    route = gateway.Route(
        provider="hf", model="org/model", base_url=llm_server.base_url, api_key=TOKEN, timeout=1
    )

    failure = _call(route)

    assert failure.kind == "timeout"
    assert failure.transient is True
    assert "no answer within 1 s from the router" in str(failure)


def test_a_bug_is_an_internal_error_without_secrets():
    explained = gateway.explain_error(
        KeyError(f"{TOKEN} at https://example.org/v1?key=abc"), secrets=("abc",)
    )

    assert explained.kind == "error"
    assert explained.message.startswith("Internal error: KeyError: ")
    assert TOKEN not in explained.message and "abc" not in explained.message


def test_an_explained_call_failure_keeps_its_kind():
    failure = gateway.LLMCallError(
        "hf:m failed: out of credits", status_code=402, kind="no_credits"
    )

    assert gateway.explain_error(failure) == ("no_credits", "hf:m failed: out of credits")


def test_a_run_whose_router_refuses_fails_with_the_reason_on_its_page(
    committed_db, alice, alice_client, monkeypatch, settings
):
    settings.TAU2_RUN_TRANSIENT_RETRIES = 1
    settings.TAU2_RUN_BACKOFF_SECONDS = 0.0
    port = _closed_port()
    monkeypatch.setenv("TAU2_HF_ROUTER_URL", f"http://127.0.0.1:{port}/v1")
    run = queued_run(alice)

    assert run_execute(run_id=run.pk, worker="test-worker") == Run.Status.FAILED

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.failure == Run.Failure.TRANSIENT  # "retry the failed runs" may try it again
    assert "refused the connection: is TAU2_HF_ROUTER_URL right" in run.error
    assert ALICE_TOKEN not in run.error
    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    assert "refused the connection" in page
    assert "InternalServerError" not in page

"""Play without a Hugging Face sign-in: the customer on a connection.

dana signed in with the laptop's developer sign-in (``dev-dana``: no Hugging Face token)
and added her own OpenAI-compatible endpoint as a connection. The Play page tells her
the truth — a customer on a connection runs on its key — and she plays with her
connection's customer (the real Celery worker asks the scripted server on the
connection's key); the server's default customer, on Hugging Face, asks her to sign in
with Hugging Face and says a connection needs none, on the form.
"""

from __future__ import annotations

import pytest

from apps.runs.models import Run, RunEvent
from tests.play.conftest import customer_says
from tests.runs.conftest import wait_for
from tests.support.connections import CONNECTION_KEY, CONNECTION_MODEL
from tests.support.connections import openai_compatible_connection as connection_of
from tests.support.people import signed_in

OPENING = "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."


@pytest.fixture(autouse=True)
def _cleared(connections_cleared):
    """No connection (nor run on one) left over from another test."""


@pytest.fixture
def endpoint(llm_server, dana):
    return connection_of(llm_server, by=dana, owner=dana, name="Dana's vLLM")


def test_the_play_page_says_where_the_customer_runs(endpoint, dana):
    page = signed_in(dana).get("/play/").content.decode()

    assert "The customer runs on your Hugging Face token." not in page
    assert "a model on a connection on that connection's key (no Hugging Face sign-in" in page
    assert f'value="@{endpoint.slug}/{CONNECTION_MODEL}"' in page
    assert "The server&#x27;s default customer (on Hugging Face, on your token)" in page


@pytest.mark.slow
def test_dana_plays_with_her_connections_customer(celery_worker, llm_server, endpoint, dana):
    customer_says(llm_server, OPENING)

    response = signed_in(dana).post(
        "/play/new/",
        {
            "domain": "airline",
            "task_id": "27",
            "split": "base",
            "user_model": f"@{endpoint.slug}/{CONNECTION_MODEL}",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    run = Run.objects.get(created_by=dana, kind=Run.Kind.HUMAN)
    assert (run.user_model, run.user_connection_id) == (CONNECTION_MODEL, endpoint.pk)
    run = wait_for(
        run,
        lambda r: r.events.filter(kind=RunEvent.Kind.CUSTOMER).exists(),
        what="the customer's opening message",
    )
    assert run.events.get(kind=RunEvent.Kind.CUSTOMER).message["content"] == OPENING
    assert {r.token for r in llm_server.chat_requests()} == {CONNECTION_KEY}


def test_the_default_customer_asks_dana_for_hugging_face_and_names_connections(
    llm_server, endpoint, dana
):
    response = signed_in(dana).post(
        "/play/new/", {"domain": "airline", "task_id": "27", "split": "base"}
    )

    assert response.status_code == 400  # the form again, the customer's field saying why
    page = response.content.decode()
    assert "This account has no Hugging Face token" in page
    assert "a model on a connection needs no Hugging Face sign-in" in page
    assert "Or pick a customer model on a connection." in page
    assert not Run.objects.filter(created_by=dana).exists()
    assert llm_server.chat_requests() == []

"""The OpenEnv playground's credentials: a page of this site opens OpenEnv's /ws on the
signed-in person's own session (no token in the page); a page of another site, or a
socket without a signed-in session, gets nothing from it."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from apps.runs.models import Run
from tests.support.people import ALICE_TOKEN, signed_in

OWN_TOKEN = "hf_own_token_playground_777777"


async def _reset(asgi_server, *, cookie: str | None, origin: str | None, **data) -> dict:
    headers = {}
    if cookie:
        headers["Cookie"] = f"sessionid={cookie}"
    if origin:
        headers["Origin"] = origin
    async with connect(asgi_server.ws_url("/ws"), additional_headers=headers) as ws:
        reset = {"domain": "airline", "task_id": "27", **data}
        await ws.send(json.dumps({"type": "reset", "data": reset}))
        return json.loads(await ws.recv())


@pytest.fixture
def alice_session(alice):
    return signed_in(alice).cookies["sessionid"].value


async def test_a_page_of_this_site_plays_on_the_signed_in_persons_own_token(
    asgi_server, customer, customer_line, alice, alice_session
):
    frame = await _reset(asgi_server, cookie=alice_session, origin=asgi_server.url)

    assert frame["type"] == "observation", frame
    assert frame["data"]["observation"]["metadata"]["user_message"] == customer_line
    assert {r.token for r in customer.chat_requests()} == {ALICE_TOKEN}
    assert ALICE_TOKEN not in json.dumps(frame)
    # A try by hand, not an agent's episode: nothing recorded.
    assert await sync_to_async(Run.objects.filter(kind=Run.Kind.AGENT).count)() == 0


@pytest.mark.parametrize(
    "origin",
    [
        "http://evil.example",
        "https://127.0.0.1",  # the same host on another scheme
    ],
)
async def test_a_page_of_another_site_is_refused_at_the_handshake(
    asgi_server, customer, alice_session, origin
):
    with pytest.raises(InvalidStatus) as refused:
        await _reset(asgi_server, cookie=alice_session, origin=origin)

    assert refused.value.response.status_code == 403
    assert customer.chat_requests() == []


async def test_a_socket_that_is_no_browser_page_gets_nothing_from_the_session(
    asgi_server, customer, alice_session
):
    frame = await _reset(asgi_server, cookie=alice_session, origin=None)

    assert frame["type"] == "error"
    assert "credentials" in frame["data"]["message"].lower() or "token" in frame["data"]["message"]
    assert customer.chat_requests() == []


async def test_without_a_signed_in_session_there_are_no_credentials(asgi_server, customer, db):
    frame = await _reset(asgi_server, cookie="no-such-session", origin=asgi_server.url)

    assert frame["type"] == "error"
    assert customer.chat_requests() == []


async def test_a_token_the_client_gives_wins_over_the_session(asgi_server, customer, alice_session):
    frame = await _reset(
        asgi_server, cookie=alice_session, origin=asgi_server.url, hf_token=OWN_TOKEN
    )

    assert frame["type"] == "observation", frame
    assert {r.token for r in customer.chat_requests()} == {OWN_TOKEN}


def test_the_playground_offers_the_catalogues_domains_splits_and_tasks(alice_client, catalogue):
    page = alice_client.get("/agents/playground/").content.decode()
    start = page.index('id="pg-domains"')
    domains = json.loads(page[page.index(">", start) + 1 : page.index("</script>", start)])

    airline = next(d for d in domains if d["name"] == "airline")
    assert {"train", "test"} <= set(airline["splits"])
    assert "27" in airline["tasks"]
    assert "/static/js/agents_playground.js" in page
    assert "<script>" not in page  # CSP: no inline script

"""A dependency that cannot be reached is no server error (``tau2site.middleware``).

A view that meets the database unreachable answers 503 with ``Retry-After`` and a plain
message — JSON for the JSON endpoints and for a client that asks for JSON, a short page
otherwise — while any other database error (an ``IntegrityError``, a deadlock, a
statement timeout, a closed cursor) stays the 500 of a bug. The site's sockets are closed
with 1013 "Try Again Later" when the database or Redis cannot be reached, accepted first
if need be, never a handshake failed with 500.

charlie (anonymous) asks: the views here raise before anyone's account would matter.
tests/runs/test_restarts.py shows the same with the servers really gone.
"""

from __future__ import annotations

import json

import psycopg
import pytest
import redis
from django import db
from django.test import Client
from django.urls import path

from tau2site.middleware import (
    DATABASE_UNAVAILABLE,
    RETRY_AFTER_SECONDS,
    SOCKET_REASONS,
    TRY_AGAIN_LATER,
    UnavailableWebsockets,
    database_unreachable,
    unreachable,
)


def wrapped(django_error: type[db.Error], cause: Exception) -> db.Error:
    """``cause`` as Django raises it: its own class of the same name, from psycopg's."""
    error = django_error(*cause.args)
    error.__cause__ = cause
    return error


OUTAGES = {
    "refused": wrapped(
        db.OperationalError,
        psycopg.OperationalError(
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
            "Connection refused"
        ),
    ),
    "shutting-down": wrapped(
        db.OperationalError, psycopg.errors.CannotConnectNow("the database system is shutting down")
    ),
    "terminated": wrapped(
        db.OperationalError,
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
    ),
    "lost": wrapped(
        db.OperationalError,
        psycopg.OperationalError("consuming input failed: server closed the connection"),
    ),
    "closed": wrapped(db.OperationalError, psycopg.OperationalError("the connection is closed")),
    "link-failure": wrapped(db.OperationalError, psycopg.errors.ConnectionFailure("08006")),
    "full": wrapped(
        db.OperationalError, psycopg.errors.TooManyConnections("too many clients already")
    ),
    "interface": wrapped(
        db.InterfaceError,
        psycopg.InterfaceError("cannot execute operations: the connection is in status 2"),
    ),
}
BUGS = {
    "integrity": wrapped(
        db.IntegrityError, psycopg.errors.UniqueViolation("duplicate key value violates")
    ),
    "data": wrapped(db.DataError, psycopg.errors.NumericValueOutOfRange("integer out of range")),
    "deadlock": wrapped(db.OperationalError, psycopg.errors.DeadlockDetected("deadlock detected")),
    "timeout": wrapped(
        db.OperationalError,
        psycopg.errors.QueryCanceled("canceling statement due to statement timeout"),
    ),
    "cursor": wrapped(db.InterfaceError, psycopg.InterfaceError("the cursor is closed")),
    "not-a-database": ValueError("connection"),
}


def raising(request, name: str):
    raise {**OUTAGES, **BUGS}[name]


urlpatterns = [
    path("boom/<str:name>/", raising),
    path("api/boom/<str:name>/", raising),
    path("boom/<str:name>/state/", raising),
    path("boom/<str:name>.json", raising),
]

pytestmark = pytest.mark.urls(__name__)


def assert_unavailable(response) -> None:
    assert response.status_code == 503
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert response["Cache-Control"] == "no-store"


@pytest.mark.parametrize("name", OUTAGES)
def test_a_page_that_loses_the_database_answers_503_with_a_short_page(name):
    response = Client().get(f"/boom/{name}/", headers={"accept": "text/html,*/*;q=0.8"})
    assert_unavailable(response)
    assert response["Content-Type"] == "text/html; charset=utf-8"
    page = response.content.decode()
    assert "<title>Unavailable for a moment" in page and DATABASE_UNAVAILABLE in page
    # It passed the site's other middleware on its way out.
    assert "Content-Security-Policy" in response and response["X-Frame-Options"] == "DENY"


@pytest.mark.parametrize(
    ("url", "accept"),
    [
        ("/boom/refused/", "application/json"),  # a page's script asking for JSON
        ("/api/boom/refused/", "*/*"),
        ("/boom/refused/state/", "*/*"),  # the live pages' state, as curl asks
        ("/boom/refused.json", "text/html"),
    ],
)
def test_json_asked_or_a_json_endpoint_gets_the_reason_in_json(url, accept):
    response = Client().get(url, headers={"accept": accept})
    assert_unavailable(response)
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"detail": DATABASE_UNAVAILABLE}


@pytest.mark.parametrize("name", BUGS)
def test_an_error_that_is_no_outage_stays_a_500(name):
    response = Client(raise_request_exception=False).get(
        f"/boom/{name}/", headers={"accept": "application/json"}
    )
    assert response.status_code == 500
    assert "Retry-After" not in response


def test_each_dependency_is_named_by_what_it_raises():
    assert [unreachable(error) for error in OUTAGES.values()] == ["database"] * len(OUTAGES)
    assert not any(database_unreachable(error) for error in BUGS.values())
    assert unreachable(redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379.")) == (
        "channel layer"
    )
    assert unreachable(redis.BusyLoadingError("Redis is loading the dataset in memory")) == (
        "channel layer"
    )
    assert unreachable(redis.ResponseError("WRONGTYPE")) is None


# --- The site's sockets ------------------------------------------------------------------------


class Socket:
    """One WebSocket as the ASGI server sees it: what the app sent, and a client that
    sends ``websocket.connect`` and then, with ``gone``, ``websocket.disconnect``."""

    def __init__(self, *, gone: bool = False, send_fails: bool = False):
        self.sent: list[dict] = []
        self.inbox = [{"type": "websocket.connect"}]
        if gone:
            self.inbox.append({"type": "websocket.disconnect", "code": 1001})
        self.send_fails = send_fails

    async def receive(self):
        return self.inbox.pop(0)

    async def send(self, message):
        if self.send_fails:
            raise OSError("the client went away")
        self.sent.append(message)


def consumer(*, accept: bool = False, read: bool = False, error: Exception):
    """An ASGI app that (reads the client's messages and) accepts or not, then fails."""

    async def app(scope, receive, send):
        await receive()
        if accept:
            await send({"type": "websocket.accept"})
        if read:
            await receive()
        raise error

    return app


async def serve(app, socket: Socket) -> None:
    await UnavailableWebsockets(app)(
        {"type": "websocket", "path": "/ws/x/"}, socket.receive, socket.send
    )


def closed_try_again(dependency: str) -> dict:
    return {
        "type": "websocket.close",
        "code": TRY_AGAIN_LATER,
        "reason": SOCKET_REASONS[dependency],
    }


async def test_a_socket_that_cannot_join_its_group_is_accepted_and_closed_try_again_later():
    socket = Socket()
    await serve(consumer(error=redis.ConnectionError("Error 111")), socket)
    assert socket.sent == [{"type": "websocket.accept"}, closed_try_again("channel layer")]


async def test_a_socket_that_loses_the_database_after_accepting_is_closed_try_again_later():
    socket = Socket()
    await serve(consumer(accept=True, error=OUTAGES["terminated"]), socket)
    assert socket.sent == [{"type": "websocket.accept"}, closed_try_again("database")]


async def test_nothing_is_sent_to_a_client_already_gone():
    socket = Socket(gone=True)
    await serve(consumer(accept=True, read=True, error=redis.ConnectionError("Error 111")), socket)
    assert socket.sent == [{"type": "websocket.accept"}]
    # Nor does a client leaving while the socket is being closed fail the app.
    await serve(consumer(error=OUTAGES["refused"]), Socket(send_fails=True))


@pytest.mark.parametrize("name", ["integrity", "cursor", "not-a-database"])
async def test_any_other_error_of_a_socket_propagates(name):
    with pytest.raises(type(BUGS[name])):
        await serve(consumer(error=BUGS[name]), Socket())

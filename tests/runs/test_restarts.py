"""The site while Redis or PostgreSQL restart under it: pages and JSON answer 503 with
``Retry-After`` instead of a 500, live sockets are accepted and closed with 1013 "Try Again
Later" instead of a handshake refused with 500, and everything answers again once the
server is back.

Each test serves ``tau2site.asgi:application`` from a uvicorn process of its own
(``tests.support.processes.start_web``), and alice watches her running evaluation and its
run from outside, as her browser would:

* in the suite, a Redis of the test's own is restarted under that server
  (``tests.support.servers.RedisServer``) and its PostgreSQL connections go through a
  proxy the test cuts (``CuttableProxy``): nobody else on the machine notices;
* in the isolated session (``make test-isolated``), the machine's own Redis and PostgreSQL
  really restart (``restart_redis``, ``restart_postgresql``), with a probe asking all the
  while.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import pytest
from django.db import connection

from tau2site.middleware import (
    DATABASE_UNAVAILABLE,
    RETRY_AFTER_SECONDS,
    SOCKET_REASONS,
    TRY_AGAIN_LATER,
)
from tests.evaluations.test_execution import restart_postgresql, restart_redis
from tests.support import processes
from tests.support.outages import (
    CuttableProxy,
    Handshake,
    Probe,
    Reply,
    Watched,
    closed_with,
    get,
    handshake,
    open_socket,
    wait_for,
    watched_by,
    web_server,
)
from tests.support.servers import RedisServer

pytestmark = pytest.mark.slow

ISOLATED = os.environ.get("TAU2_TEST_ISOLATED") == "1"
# These restart the machine's PostgreSQL and Redis: never beside other tests.
restarts = pytest.mark.skipif(not ISOLATED, reason="restarts the servers: `make test-isolated`")

BACK_S = 60  # seconds for the site to answer again once the server is back (a loaded machine)


@pytest.fixture
def watched(alice) -> Watched:
    return watched_by(alice)


def database_url_through(proxy: CuttableProxy) -> str:
    """The test database's URL by way of ``proxy``."""
    db = connection.settings_dict
    return f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}"


def socket_answer(web: processes.Process, watched: Watched, path: str) -> Handshake:
    return handshake(web.ws_url(path), cookie=watched.cookie, origin=web.url)


def page_answer(web: processes.Process, watched: Watched, path: str, *, accept: str) -> Reply:
    return get(web.url + path, cookie=watched.cookie, accept=accept)


def served(answer: Handshake) -> bool:
    """Accepted, and the first frame (the state, the status) came."""
    return answer.status == 101 and answer.frame is not None


def try_again_later(answer: Handshake, *, naming: str) -> bool:
    """Accepted, then closed with 1013 before any frame, with a reason naming ``naming``."""
    return (
        answer.status == 101
        and answer.frame is None
        and answer.code == TRY_AGAIN_LATER
        and naming in answer.reason
    )


def unavailable(reply: Reply, *, as_json: bool) -> bool:
    """503 with ``Retry-After`` and a plain message: JSON's ``detail`` or a short page."""
    if reply.status != 503 or reply.headers.get("retry-after") != str(RETRY_AFTER_SECONDS):
        return False
    if as_json:
        return json.loads(reply.body) == {"detail": DATABASE_UNAVAILABLE}
    return reply.headers["content-type"].startswith("text/html") and (
        DATABASE_UNAVAILABLE in reply.body
    )


# --- Redis: a private one, stopped and started under the server --------------------------


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def test_a_live_socket_is_closed_try_again_later_while_redis_is_down(
    watched, private_redis, llm_server
):
    with web_server(llm_server, REDIS_URL=private_redis.url()) as web:
        for path in watched.sockets:
            assert served(socket_answer(web, watched, path)), path

        private_redis.stop()
        for path in watched.sockets:
            answer = socket_answer(web, watched, path)
            assert try_again_later(answer, naming="Redis"), (path, answer)
        for path in watched.pages:  # the pages themselves need no Redis
            assert page_answer(web, watched, path, accept="text/html").status == 200

        private_redis.start()
        for path in watched.sockets:
            wait_for(
                lambda path=path: served(socket_answer(web, watched, path)),
                timeout=BACK_S,
                what=f"{path} serving again",
            )


def test_sockets_open_when_redis_goes_are_closed_try_again_later(
    watched, private_redis, llm_server
):
    # Redis comes back empty: a socket kept open would have lost its group and hear
    # nothing more, so each is closed, for its page to reopen and join again.
    with web_server(llm_server, REDIS_URL=private_redis.url()) as web:
        sockets = [
            open_socket(web.ws_url(path), cookie=watched.cookie, origin=web.url)
            for path in watched.sockets
        ]
        for ws in sockets:
            ws.recv(timeout=10)  # the first frame: served

        private_redis.stop()
        for ws in sockets:
            with ws:
                code, reason = closed_with(ws)
            assert (code, "Redis" in reason) == (TRY_AGAIN_LATER, True)


def test_no_handshake_is_refused_while_redis_restarts(watched, private_redis, llm_server):
    with web_server(llm_server, REDIS_URL=private_redis.url()) as web:
        probe = Probe(lambda: socket_answer(web, watched, watched.sockets[0]), every=0.05)
        with probe.running():
            wait_for(lambda: len(probe.seen) >= 3, timeout=30, what="the probe going")
            private_redis.stop()
            wait_for(
                lambda: try_again_later(probe.seen[-1], naming="Redis"),
                timeout=30,
                what="a socket closed try-again-later",
            )
            private_redis.start()
            wait_for(lambda: served(probe.seen[-1]), timeout=BACK_S, what="serving again")

    answers = {"served" if served(a) else a for a in probe.seen}
    assert answers == {
        "served",
        Handshake(status=101, code=TRY_AGAIN_LATER, reason=SOCKET_REASONS["channel layer"]),
    }


# --- PostgreSQL: behind a proxy the test cuts ----------------------------------------------


@pytest.fixture
def database_proxy() -> Iterator[CuttableProxy]:
    db = connection.settings_dict
    proxy = CuttableProxy(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)).start()
    yield proxy
    proxy.stop()


def test_pages_json_and_sockets_say_try_again_while_the_database_is_unreachable(
    watched, database_proxy, llm_server
):
    with web_server(llm_server, DATABASE_URL=database_url_through(database_proxy)) as web:
        assert page_answer(web, watched, watched.state, accept="application/json").status == 200
        assert served(socket_answer(web, watched, watched.sockets[0]))

        database_proxy.cut()
        # The live pages' JSON, asked as their scripts ask, and as curl does (*/*).
        for accept in ("application/json", "*/*"):
            reply = page_answer(web, watched, watched.state, accept=accept)
            assert unavailable(reply, as_json=True), reply
        for path in watched.pages:
            reply = page_answer(web, watched, path, accept="text/html,*/*;q=0.8")
            assert unavailable(reply, as_json=False), (path, reply)
            assert "<title>Unavailable for a moment" in reply.body
        for path in watched.sockets:  # refused as the session's user is looked up
            answer = socket_answer(web, watched, path)
            assert try_again_later(answer, naming="database"), (path, answer)
        assert get(web.url + "/health", cookie="", accept="*/*").status == 200

        database_proxy.restore()
        wait_for(
            lambda: page_answer(web, watched, watched.state, accept="*/*").status == 200,
            timeout=BACK_S,
            what="the state answering again",
        )
        for path in watched.pages:
            assert page_answer(web, watched, path, accept="text/html").status == 200
        for path in watched.sockets:
            assert served(socket_answer(web, watched, path)), path


# --- The machine's Redis and PostgreSQL, really restarted (the isolated session) ------------


def probing_everything(web: processes.Process, watched: Watched) -> tuple[Probe, Probe, Probe]:
    """Visitors asking, all the while: a live socket, the state as a page's script asks,
    and a page as a browser asks."""
    return (
        Probe(lambda: socket_answer(web, watched, watched.sockets[0]), every=0.05),
        Probe(lambda: page_answer(web, watched, watched.state, accept="application/json")),
        Probe(lambda: page_answer(web, watched, watched.pages[1], accept="text/html")),
    )


def seen(reply: Reply | Exception) -> int | Exception:
    """The status a visitor got, or the error that stood for one (a broken connection)."""
    return reply.status if isinstance(reply, Reply) else reply


@contextlib.contextmanager
def all_running(*probes: Probe) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for probe in probes:
            stack.enter_context(probe.running())
        wait_for(lambda: all(len(p.seen) >= 3 for p in probes), timeout=30, what="probes going")
        yield


@restarts
def test_nothing_answers_500_while_the_machines_redis_restarts(watched, llm_server):
    with web_server(llm_server) as web:
        sockets, states, pages = probing_everything(web, watched)
        opened = [
            open_socket(web.ws_url(path), cookie=watched.cookie, origin=web.url)
            for path in watched.sockets
        ]
        for ws in opened:
            ws.recv(timeout=10)
        with all_running(sockets, states, pages):
            restart_redis()
            for ws in opened:  # each lost its group with Redis: closed, for a page to reopen
                with ws:
                    code, reason = closed_with(ws)
                assert (code, "Redis" in reason) == (TRY_AGAIN_LATER, True)
            wait_for(lambda: served(sockets.seen[-1]), timeout=BACK_S, what="serving again")

    redis_closed = Handshake(
        status=101, code=TRY_AGAIN_LATER, reason=SOCKET_REASONS["channel layer"]
    )
    assert {"served" if served(a) else a for a in sockets.seen} <= {"served", redis_closed}
    assert {seen(reply) for reply in states.seen + pages.seen} == {200}  # they need no Redis


@restarts
def test_nothing_answers_500_but_503_while_the_machines_postgresql_restarts(watched, llm_server):
    with web_server(llm_server) as web:
        sockets, states, pages = probing_everything(web, watched)
        with all_running(sockets, states, pages):
            restart_postgresql()
            wait_for(
                lambda: states.seen[-1].status == 200 and served(sockets.seen[-1]),
                timeout=BACK_S,
                what="answering again",
            )

    database_closed = Handshake(status=101, code=TRY_AGAIN_LATER, reason=SOCKET_REASONS["database"])
    assert {"served" if served(a) else a for a in sockets.seen} <= {"served", database_closed}
    for probe, as_json in ((states, True), (pages, False)):
        outcomes = {
            "unavailable" if isinstance(r, Reply) and unavailable(r, as_json=as_json) else seen(r)
            for r in probe.seen
        }
        # Some asked while it was down (a restart takes 2-3 s), and were told to try again.
        assert outcomes == {200, "unavailable"}

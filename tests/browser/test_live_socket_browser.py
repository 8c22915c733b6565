"""The live pages' socket (static/js/live_socket.js) in Chromium when the connection breaks.

Playwright stands between each page and the real server (ASGI app, channels_redis, a
Celery worker, the scripted LLM) and breaks the connection on a chosen frame: that frame
never reaches the page, as if the network dropped while the server sent it. Each page must
reopen, resume from what it has shown, end with every event once, and open no socket
once it has nothing left to wait for. And while the server's Redis is down (a Redis of
the test's own, under a server process of its own), the pages keep what they show and
say they are reconnecting, until they are. alice watches her own run, play session,
evaluation and race.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlparse

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.evaluations.models import Evaluation
from apps.races.models import Race, RaceLane
from apps.runs.consumers import RunConsumer
from apps.runs.models import Run, RunEvent
from apps.tasks.models import Task
from tests.play.conftest import customer_says
from tests.support.outages import watched_by, web_server
from tests.support.people import browser_signed_in
from tests.support.races import RACE_MODELS, race_script, start_race
from tests.support.scripts import (
    AGENT_MODEL,
    gold_script,
    refresh_agent_models,
    run_start,
)
from tests.support.servers import RedisServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLOW = 60_000
# Longer than the helper's first backoff (500 ms): a socket that should reopen has.
SETTLE_MS = 2_000

Frame = dict
Condition = Callable[[Frame], bool]


@dataclass
class Connection:
    path: str
    query: dict[str, str]
    shown: list[Frame] = field(default_factory=list)  # frames the page got, in order
    held: Frame | None = None  # withheld from the page, the connection kept open
    broken_at: Frame | None = None
    close: Callable[[], None] | None = None


@dataclass
class Held:
    """A step that withholds the frame meeting ``condition`` (later frames still pass) and
    keeps the connection until the test breaks it with ``BrokenSockets.break_held()``."""

    condition: Condition


class BrokenSockets:
    """Proxies the page's sockets matching ``pattern`` and breaks each path's connection
    at the first frame meeting ``conditions[0]``, then (on that path's next socket) at
    the first meeting ``conditions[1]``, and so on; a ``Held`` step withholds its frame
    and leaves the break to the test.

    With ``resend``, a reopened socket first hands the page again the last event it had
    on that path (a server resending one too many): the page must not show it twice.
    """

    def __init__(self, page, pattern: str, *conditions: Condition | Held, resend: bool = False):
        self.conditions = conditions
        self.resend = resend
        self.connections: list[Connection] = []
        self.watched = threading.Event()  # set at the first socket
        self._pending: dict[str, list[Condition | Held]] = {}
        self._last_event: dict[str, str] = {}
        page.route_web_socket(re.compile(pattern), self._route)

    def on(self, path: str) -> list[Connection]:
        return [c for c in self.connections if c.path == path]

    def break_held(self, page, timeout_ms: int = 60_000) -> None:
        """Break every connection that is withholding a frame, once one is.

        The page can know its session is final (from its own POST's answer) before the
        server's last event has reached this proxy: breaking then would break nothing, and
        the frame, held later, would never be let go. Playwright's sync API runs this
        proxy's callbacks only inside its own calls, hence the waits on the page."""
        waited = 0
        while not any(c.held is not None and c.broken_at is None for c in self.connections):
            assert waited < timeout_ms, "no frame was ever held"
            page.wait_for_timeout(100)
            waited += 100
        for connection in self.connections:
            if connection.held is not None and connection.broken_at is None:
                connection.broken_at = connection.held
                connection.close()

    def _route(self, ws) -> None:
        url = urlparse(ws.url)
        connection = Connection(url.path, {k: v[-1] for k, v in parse_qs(url.query).items()})
        self.connections.append(connection)
        pending = self._pending.setdefault(url.path, list(self.conditions))
        stale = self._last_event.get(url.path) if self.resend else None
        server = ws.connect_to_server()
        connection.close = ws.close  # the page's side; Playwright closes the server's too
        self.watched.set()

        def forward(message) -> None:
            nonlocal stale
            if connection.broken_at is not None:
                return  # the connection is gone: nothing more reaches the page
            frame = json.loads(message)
            if pending and isinstance(pending[0], Held) and pending[0].condition(frame):
                pending.pop(0)
                connection.held = frame
                return
            if pending and not isinstance(pending[0], Held) and pending[0](frame):
                pending.pop(0)
                connection.broken_at = frame
                ws.close()
                return
            if stale is not None:
                ws.send(stale)
                stale = None
            connection.shown.append(frame)
            if frame.get("type") == "event":
                self._last_event[url.path] = message
            ws.send(message)

        server.on_message(forward)


def held_until_watched(llm, sockets: BrokenSockets) -> None:
    """The scripted LLM answers nothing before the page's first socket is open, so the
    runs' events reach the page over sockets, not in its first HTML."""
    inner = llm.responder

    def responder(request):
        assert sockets.watched.wait(30), "the page opened no socket"
        return inner(request)

    llm.responder = responder


def nth(kind: str, n: int) -> Condition:
    """The ``n``-th frame of type ``kind`` the proxy sees (1-based)."""
    seen = 0

    def condition(frame: Frame) -> bool:
        nonlocal seen
        if frame.get("type") != kind:
            return False
        seen += 1
        return seen == n

    return condition


def event_with(text: str) -> Condition:
    return lambda frame: frame.get("type") == "event" and text in frame["html"]


def final_status(frame: Frame) -> bool:
    return frame.get("type") in ("status", "state") and bool(frame.get("final"))


def first_run_done(frame: Frame) -> bool:
    return frame.get("type") == "state" and frame["version"] >= 1 and not frame["final"]


def shown_seqs(page) -> list[int]:
    return [
        int(seq)
        for seq in page.get_by_test_id("conversation")
        .get_by_test_id("event")
        .evaluate_all("events => events.map(e => e.dataset.seq)")
    ]


def last_event_seq(connections: list[Connection], default: int) -> int:
    seqs = [f["seq"] for c in connections for f in c.shown if f.get("type") == "event"]
    return max(seqs, default=default)


def last_version(connections: list[Connection]) -> int:
    return [f["version"] for c in connections for f in c.shown if f.get("type") == "state"][-1]


def test_the_run_page_resumes_after_drops_without_gap_or_duplicate(
    page, alice, alice_client, base_url, celery_worker, llm_server
):
    # Broken mid-stream (events the server sent meanwhile are lost with the connection),
    # then on the final status.
    sockets = BrokenSockets(page, r"/ws/runs/\d+/", nth("event", 3), final_status, resend=True)
    refresh_agent_models()
    gold_script(llm_server, delay=0.3)
    held_until_watched(llm_server, sockets)
    run = run_start(alice_client)
    browser_signed_in(page, alice, base_url)

    page.goto(f"/runs/{run.pk}/")
    expect(page.get_by_test_id("reward")).to_have_text("1.00", timeout=SLOW)
    expect(page.get_by_test_id("status")).to_have_text("completed")
    page.wait_for_timeout(SETTLE_MS)

    first, second, third = sockets.on(f"/ws/runs/{run.pk}/")  # and no fourth once final
    assert first.broken_at["type"] == "event" and second.broken_at["type"] == "status"
    # Each reopened socket asks for what came after the last event the page had shown.
    assert int(second.query["after"]) == first.broken_at["seq"] - 1
    assert int(third.query["after"]) == last_event_seq([first, second], default=-1)
    run.refresh_from_db()
    assert shown_seqs(page) == list(range(run.events.count()))
    expect(page.locator("#live-indicator")).to_have_text("")


def test_the_play_page_resumes_and_waits_for_the_sessions_last_event(
    page, alice, base_url, celery_worker, llm_server
):
    customer_says(
        llm_server,
        "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396.",
        "Wonderful, thank you so much!",
    )
    # Broken on the customer's reply. Then τ²'s stop event is withheld until the page
    # knows the session is final (its state, fetched on the status, says so), and the
    # connection breaks: final, yet without its last event, the page must reopen (09f6740).
    sockets = BrokenSockets(
        page,
        r"/ws/runs/\d+/",
        event_with("Wonderful"),
        Held(event_with('data-testid="stop-marker"')),
        resend=True,
    )
    browser_signed_in(page, alice, base_url)

    page.goto("/tasks/airline/27/")
    page.get_by_test_id("play").click()
    page.get_by_test_id("start-play").click()
    expect(page).to_have_url(re.compile(r"/play/\d+/$"))
    run = Run.objects.get(kind=Run.Kind.HUMAN, created_by=alice)
    conversation = page.get_by_test_id("conversation")
    expect(conversation).to_contain_text("ethan_martin_2396", timeout=SLOW)

    page.get_by_test_id("say-text").fill("Let me look into that for you.")
    page.get_by_test_id("say-text").press("Enter")
    expect(conversation).to_contain_text("Wonderful", timeout=SLOW)
    expect(page.get_by_test_id("say-text")).to_be_enabled(timeout=SLOW)

    page.get_by_test_id("end").click()
    expect(page.locator('#play[data-final="true"]')).to_have_count(1, timeout=SLOW)
    expect(page.get_by_test_id("stop-marker")).to_have_count(0)
    sockets.break_held(page)
    expect(page.get_by_test_id("session-ended")).to_be_visible(timeout=SLOW)
    expect(page.get_by_test_id("stop-marker")).to_contain_text(
        "The agent ended the conversation", timeout=SLOW
    )
    page.wait_for_timeout(SETTLE_MS)

    first, second, third = sockets.on(f"/ws/runs/{run.pk}/")  # and no fourth once shown
    assert int(second.query["after"]) == first.broken_at["seq"] - 1
    assert int(third.query["after"]) == second.broken_at["seq"] - 1
    run.refresh_from_db()
    assert run.is_final
    assert shown_seqs(page) == list(range(run.events.count()))


def test_the_evaluation_page_reopens_from_the_version_it_has_drawn(
    page, alice, alice_client, base_url, celery_worker, llm_server
):
    refresh_agent_models()
    # Broken on the state where the first run is done (version 1), then on the final one.
    sockets = BrokenSockets(page, r"/ws/evaluations/\d+/", first_run_done, final_status)
    gold_script(llm_server, delay=0.3)
    held_until_watched(llm_server, sockets)
    response = alice_client.post(
        "/evaluations/new/",
        {
            "domain": "airline",
            "split": "train",
            "task_ids": "27",
            "q": "",
            "kind": "",
            "agent_model": AGENT_MODEL,
            "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
            "num_trials": "2",
            "seed": "300",
            "max_steps": "200",
            "max_errors": "10",
            "concurrency": "1",  # one run after the other: a version for each
            "name": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    evaluation = Evaluation.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    browser_signed_in(page, alice, base_url)

    page.goto(f"/evaluations/{evaluation.pk}/")
    page.evaluate("() => { window.stillTheSamePage = true; }")
    expect(page.get_by_test_id("evaluation-status")).to_have_text("completed", timeout=SLOW)
    expect(page.locator('[data-testid="cell"].c-pass')).to_have_count(2)
    assert page.evaluate("() => window.stillTheSamePage") is True  # live, not reloaded
    page.wait_for_timeout(SETTLE_MS)

    first, second, third = sockets.on(f"/ws/evaluations/{evaluation.pk}/")  # and no fourth
    assert third.broken_at is None and second.broken_at["final"]
    # Each reopened socket says which version the page has drawn.
    assert int(second.query["version"]) == last_version([first])
    assert int(third.query["version"]) == last_version([first, second])


def test_the_race_page_reopens_each_lane_for_its_lost_final_status(
    page, alice, alice_client, base_url, celery_worker, llm_server
):
    refresh_agent_models()
    sockets = BrokenSockets(page, r"/ws/runs/\d+/", final_status)
    race_script(llm_server)
    held_until_watched(llm_server, sockets)
    response = start_race(alice_client, RACE_MODELS)
    assert response.status_code == 302, response.content.decode()[:2000]
    race = Race.objects.get(pk=int(response["Location"].rstrip("/").split("/")[-1]))
    browser_signed_in(page, alice, base_url)

    page.goto(f"/races/{race.pk}/")
    expect(page.locator('[data-testid="race-lane"][data-place]')).to_have_count(3, timeout=90_000)
    expect(page.get_by_test_id("race-live-indicator")).to_have_text("", timeout=SLOW)
    page.wait_for_timeout(SETTLE_MS)

    for lane in race.lanes.all():
        first, second = sockets.on(f"/ws/runs/{lane.run_id}/")  # and no third once final
        assert first.broken_at is not None
        assert int(second.query["after"]) == last_event_seq([first], default=-1)


def test_the_live_pages_say_reconnecting_while_redis_is_down_and_keep_what_they_show(
    page, alice, llm_server
):
    watched = watched_by(alice)
    with RedisServer() as redis_server, web_server(llm_server, REDIS_URL=redis_server.url()) as web:
        browser_signed_in(page, alice, web.url)
        run_page = page
        evaluation_page = page.context.new_page()
        run_page.goto(web.url + watched.pages[1])
        evaluation_page.goto(web.url + watched.pages[0])
        for shown in (run_page, evaluation_page):
            expect(shown.get_by_test_id("live")).to_have_text("Live…")
            shown.evaluate("() => { window.stillTheSamePage = true; }")
        events = run_page.get_by_test_id("conversation").get_by_test_id("event")
        expect(events).to_have_count(3)
        cells = evaluation_page.get_by_test_id("cell")
        drawn = cells.count()
        assert drawn > 0

        # The server accepts each socket and closes it with 1013: they keep trying.
        redis_server.stop()
        for shown in (run_page, evaluation_page):
            notice = shown.get_by_test_id("live-notice")
            expect(notice).to_be_visible(timeout=SLOW)
            expect(notice).to_contain_text("Reconnecting…")
        expect(events).to_have_count(3)
        expect(cells).to_have_count(drawn)

        redis_server.start()
        for shown in (run_page, evaluation_page):
            expect(shown.get_by_test_id("live-notice")).to_be_hidden(timeout=SLOW)
            expect(shown.get_by_test_id("live")).to_have_text("Live…")
            assert shown.evaluate("() => window.stillTheSamePage") is True  # not reloaded
        assert shown_seqs(run_page) == [0, 1, 2]


def quiet_race(user) -> Race:
    """A race of airline/27 by ``user`` with one running lane that has said three things
    and then waits (as for a model call that takes long): nothing is announced."""
    task = Task.objects.get(domain_id="airline", task_id="27")
    race = Race.objects.create(created_by=user, task=task, user_model="u/m", seed=300)
    run = Run.objects.create(
        created_by=user,
        domain="airline",
        task=task,
        agent_model="org/model-b",
        user_model="u/m",
        status=Run.Status.RUNNING,
        started_at=timezone.now(),
        n_messages=3,
    )
    RunEvent.objects.bulk_create(
        RunEvent(
            run=run,
            seq=seq,
            kind=RunEvent.Kind.AGENT if seq % 2 == 0 else RunEvent.Kind.CUSTOMER,
            message={"role": "assistant" if seq % 2 == 0 else "user", "content": f"line {seq}"},
        )
        for seq in range(3)
    )
    RaceLane.objects.create(race=race, run=run, position=0)
    return race


def test_quiet_run_and_race_pages_keep_one_socket_past_their_watchdog(
    page, alice, base_url, monkeypatch
):
    """Issue 33: a run waiting 60 s for a model call said nothing on its socket; the run
    and race pages' 30 s watchdog closed and reopened it ("Reconnecting…" flickered). The
    consumer now sends keepalives while the run is live (every 3 s here, 15 s in
    production): 35 quiet seconds pass on one socket per page."""
    monkeypatch.setattr(RunConsumer, "KEEPALIVE_SECONDS", 3.0)
    watched = watched_by(alice)
    race = quiet_race(alice)
    browser_signed_in(page, alice, base_url)
    race_page = page.context.new_page()
    sockets: dict[str, list[str]] = {"run": [], "race": []}
    keepalives: dict[str, int] = {"run": 0, "race": 0}

    def follow(name: str):
        def opened(ws) -> None:
            sockets[name].append(ws.url)

            def received(payload) -> None:
                if json.loads(payload).get("type") == "keepalive":
                    keepalives[name] += 1

            ws.on("framereceived", received)

        return opened

    page.on("websocket", follow("run"))
    race_page.on("websocket", follow("race"))
    page.goto(watched.pages[1])
    race_page.goto(f"/races/{race.pk}/")
    expect(page.get_by_test_id("live")).to_have_text("Live…")
    page.evaluate("() => { window.stillTheSamePage = true; }")
    race_page.evaluate("() => { window.stillTheSamePage = true; }")

    page.wait_for_timeout(35_000)  # longer than the pages' watchdog (30 s)

    assert len(sockets["run"]) == 1 and len(sockets["race"]) == 1, sockets
    assert keepalives["run"] >= 8 and keepalives["race"] >= 8, keepalives
    for shown in (page, race_page):
        expect(shown.get_by_test_id("live-notice")).to_have_count(0)
        assert shown.evaluate("() => window.stillTheSamePage") is True
    expect(page.get_by_test_id("live")).to_have_text("Live…")
    expect(page.get_by_test_id("conversation").get_by_test_id("event")).to_have_count(3)

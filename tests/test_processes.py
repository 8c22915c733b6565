"""Several processes, as in production: two web servers and two Celery workers, each a
process of its own, sharing only PostgreSQL and Redis.

A run started through web process A streams live to a browser connected to web process
B (and the other way round): the worker's events reach B through channels_redis, and
whatever B reads comes from PostgreSQL. Each run is driven by a different worker process.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from websockets.sync.client import connect

from apps.runs.models import Run
from tests.runs.conftest import AGENT_MODEL, GOLD_TASK, gold_script
from tests.support import processes

pytestmark = pytest.mark.slow

TIMEOUT = 120.0  # seconds; generous: a loaded 2-core machine runs the whole suite too


@dataclass
class Deployment:
    web_a: processes.Process
    web_b: processes.Process
    workers: list[processes.Process]


@pytest.fixture
def deployment(committed_db, llm_server, settings) -> Iterator[Deployment]:
    """Two ``uvicorn tau2site.asgi:application`` and two ``celery worker`` processes.

    The workers take one run at a time (``--concurrency 1``), so while one holds a run the
    next message can only go to the other. They and the web servers use a queue of their
    own, so the session's worker (tests/conftest.py) never takes these runs.
    """
    import redis

    from apps.inference.services import catalogue_refresh

    assert catalogue_refresh().source == "router"  # the run form picks from it
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-processes"
    redis.Redis.from_url(settings.REDIS_URL).delete(queue)  # nothing left from an earlier run
    # The LLM timeout outlasts the test's gate on the scripted LLM (see below).
    env = processes.environment(
        llm=llm_server, extra={"CELERY_QUEUE": queue, "TAU2_LLM_TIMEOUT": str(int(TIMEOUT))}
    )
    started: list[processes.Process] = []
    try:
        for _ in range(2):
            started.append(processes.start_web(env))
        for name in ("worker-a", "worker-b"):
            started.append(processes.start_worker(env, queue=queue, name=name, concurrency=1))
        processes.wait_until_up(*started)
        yield Deployment(web_a=started[0], web_b=started[1], workers=started[2:])
    finally:
        for process in reversed(started):
            processes.stop(process)


def _start_run(web: processes.Process, session: str) -> int:
    """Start alice's model run as her browser does: the form (CSRF token), then POST."""
    cookie = f"sessionid={session}"
    page = httpx.get(
        f"{web.url}/runs/new/",
        params={"domain": GOLD_TASK[0], "task": GOLD_TASK[1]},
        headers={"Cookie": cookie},
        timeout=TIMEOUT,
    )
    assert page.status_code == 200, page.text[:2000]
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token, "the form carries a CSRF token"
    response = httpx.post(
        f"{web.url}/runs/new/",
        data={
            "csrfmiddlewaretoken": token.group(1),
            "domain": GOLD_TASK[0],
            "task_id": GOLD_TASK[1],
            "agent_model": AGENT_MODEL,
            "user_model": "deepseek-ai/DeepSeek-V4.1-Flash",
            "max_steps": 30,
            "seed": 7,
        },
        headers={"Cookie": f"{cookie}; csrftoken={page.cookies['csrftoken']}"},
        timeout=TIMEOUT,
    )
    assert response.status_code == 302, response.text[:2000]
    return int(response.headers["location"].rstrip("/").split("/")[-1])


def _browser(web: processes.Process, run_id: int, session: str):
    return connect(
        web.ws_url(f"/ws/runs/{run_id}/?after=-1"),
        additional_headers={"Cookie": f"sessionid={session}", "Origin": web.url},
        open_timeout=TIMEOUT,
        max_queue=None,  # read one socket after the other: the second one buffers meanwhile
    )


class Browser:
    """What a live run page receives on ``/ws/runs/<id>/``: events (``seen``), those sent
    live (``live``: after the first status line, which ends the history sent on connect)
    and the final status."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.seen: list[int] = []
        self.live: list[int] = []
        self.statuses = 0
        self.final: dict | None = None

    def read(self, *, until_final: bool) -> None:
        """Read up to the first status line, or up to the final one."""
        for _ in range(500):
            data = json.loads(self.ws.recv(timeout=TIMEOUT))
            if data["type"] == "event":
                self.seen.append(data["seq"])
                if self.statuses:
                    self.live.append(data["seq"])
                continue
            self.statuses += 1
            if data["final"]:
                self.final = data
                return
            if not until_final:
                return
        pytest.fail("the run never reached a final status over the socket")


def _wait_until_claimed(run_ids: list[int]) -> list[Run]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        runs = [Run.objects.get(pk=pk) for pk in run_ids]
        if all(run.status == Run.Status.RUNNING and run.worker for run in runs):
            return runs
        if time.monotonic() > deadline:
            states = [(run.pk, run.status, run.worker, run.error) for run in runs]
            pytest.fail(f"both runs should have been taken by a worker each: {states}")
        time.sleep(0.2)


def _worker_pid(run: Run) -> int:
    # apps.runs.tasks names the holder "<hostname>:<pid>:<execution>".
    return int(run.worker.split(":")[1])


def test_a_run_started_through_one_web_process_streams_live_to_a_browser_on_another(
    deployment, llm_server, alice, alice_client
):
    # The scripted LLM answers only once both browsers are connected: everything after
    # τ²'s greeting must reach them live, not as history read on connect.
    gate = threading.Event()
    gold_script(llm_server)
    solve = llm_server.responder

    def after_the_gate(request):
        gate.wait(timeout=TIMEOUT)
        return solve(request)

    llm_server.responder = after_the_gate
    session = alice_client.cookies["sessionid"].value

    try:
        first = _start_run(deployment.web_a, session)
        second = _start_run(deployment.web_b, session)
        with (
            _browser(deployment.web_b, first, session) as on_b,
            _browser(deployment.web_a, second, session) as on_a,
        ):
            browsers = {first: Browser(on_b), second: Browser(on_a)}
            for browser in browsers.values():
                browser.read(until_final=False)  # connected, history sent
            claimed = _wait_until_claimed([first, second])
            gate.set()
            for browser in browsers.values():
                browser.read(until_final=True)
    finally:
        gate.set()  # never leave a worker waiting on the LLM at teardown

    # Two worker processes, one run each.
    assert {_worker_pid(run) for run in claimed} == {w.pid for w in deployment.workers}
    for run_id, browser in browsers.items():
        run = Run.objects.get(pk=run_id)
        assert run.status == Run.Status.COMPLETED, run.error
        assert run.reward == 1.0
        assert browser.final["status"] == "completed"
        assert 'data-testid="reward"' in browser.final["html"]
        # Every event once, in order; all but τ²'s greeting (stored before the LLM's
        # first answer) reached the browser live.
        assert browser.seen == list(range(run.events.count()))
        assert [seq for seq in browser.seen if seq not in browser.live] in ([], [0])
        assert len(browser.live) >= len(browser.seen) - 1 > 0

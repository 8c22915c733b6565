"""Evaluations under faults: a worker killed, Redis and PostgreSQL restarted, no worker at all.

Run by hand: ``.venv/bin/python bench/chaos.py [--repetitions 5] [--scenarios all]
[--delay 0.7]``. Everything listens on 127.0.0.1 only, and everything it restarts is its
own: a private PostgreSQL cluster and a private ``redis-server`` on free ports (the
machine's servers are never touched), the scripted LLM in a child process, uvicorn, one
Celery worker of 8 threads kept alive by a supervisor thread (restarted 1 s after it
exits, as an orchestrator's restart policy does) and beat; lease 15 s, reap 10 s.

First a fault-free baseline: one evaluation of airline/test × 2 trials (40 runs; the
read-only script of ``bench/evaluations.py``, every run the same four LLM calls). Then,
per scenario and repetition, the same evaluation, the faults fired once 13 of its 40 runs
are final:

* ``kill-redis-pg``: the worker killed (``kill -9``), 10 s later Redis restarted, 10 s
  later PostgreSQL restarted;
* ``redis-after-ready``: the worker killed; 0.2–0.5 s after its replacement is ready
  (answers ``ping``), Redis restarted; the replacement must still be alive 15 s later;
* ``no-worker``: the worker stopped and not restarted for 40 s: when ``/health/workers``
  and the evaluation page first say so, then the worker started again.

Each repetition must finish (every run final, the evaluation completed) within
``--timeout``; its runs are compared with the baseline's (status, reward, and every
message's role, text and tool calls). Meanwhile a prober, signed in, asks every 0.25 s for
the evaluation page, its ``/state/`` JSON and a WebSocket handshake on its live socket,
counting answers of 500 and above. The table prints each scenario's finished / equal /
recovery time (the fault → completed) / 5xx / worker deaths.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import harness  # noqa: E402
from tests.support import processes  # noqa: E402

TASKS = 20  # airline/test
TRIALS = 2
FIRE_AT = 13  # final runs before the faults
SCENARIOS = ("kill-redis-pg", "redis-after-ready", "no-worker")


class Redis:
    """A private ``redis-server`` on a free port, restarted in place."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tau2-chaos-redis-")
        self.port = processes.free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Redis:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while (
            subprocess.run(
                ["redis-cli", "-p", str(self.port), "ping"], capture_output=True
            ).stdout.strip()
            != b"PONG"
        ):
            if time.monotonic() > deadline:
                raise SystemExit("the private Redis did not start")
            time.sleep(0.05)
        return self

    def restart(self) -> None:
        self.stop(keep_dir=True)
        self.start()

    def stop(self, *, keep_dir: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class Supervisor:
    """Keeps one worker alive: restarts it ``delay`` s after it exits (unless paused)."""

    def __init__(self, stack: harness.Stack, *, threads: int, delay: float = 1.0) -> None:
        self.stack, self.threads, self.delay = stack, threads, delay
        self.worker: processes.Process | None = None
        self.deaths = 0  # exits (a kill included)
        self.kills = 0
        self.ready_at = 0.0  # time.monotonic() the current worker first answered ping
        self.paused = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def start(self) -> None:
        self._start_worker()
        self._thread.start()

    def _start_worker(self) -> None:
        worker = processes.start_worker(
            self.stack.env, queue=harness.NAME, name="chaos", concurrency=self.threads
        )
        with self._lock:
            self.worker = worker  # watched from now on: if it exits, it is restarted
        deadline = time.monotonic() + 180
        while worker.proc.poll() is None and time.monotonic() < deadline:
            try:  # ready = answers ping (which fails while Redis is away: ask again)
                processes.wait_until_up(worker, timeout=5)
            except Exception:  # noqa: BLE001, S112 - not up yet, or the broker away
                continue
            with self._lock:
                self.ready_at = time.monotonic()
            return

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            worker = self.worker
            if self.paused.is_set() or worker is None or worker.proc.poll() is None:
                continue
            self.deaths += 1
            time.sleep(self.delay)
            if not self.paused.is_set() and not self._stop.is_set():
                self._start_worker()

    def kill(self) -> None:
        """``kill -9`` the worker (the supervisor restarts it)."""
        worker = self.worker
        if worker is not None and worker.proc.poll() is None:
            self.kills += 1
            worker.proc.send_signal(signal.SIGKILL)
            worker.proc.wait(timeout=20)

    def stop_worker(self) -> None:
        """Pause supervision and stop the worker gracefully."""
        self.paused.set()
        worker = self.worker
        if worker is not None:
            processes.stop(worker)

    def resume(self) -> None:
        self._start_worker()
        self.paused.clear()

    def close(self) -> None:
        self._stop.set()
        self.paused.set()
        if self.worker is not None:
            processes.stop(self.worker)


@dataclass
class Probe:
    """A signed-in visitor asking, every 0.25 s, for the page, its state and its socket."""

    server: str
    cookie: str
    evaluation_id: int
    errors: list[str] = field(default_factory=list)  # one per answer ≥ 500
    asked: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=lambda: asyncio.run(self._loop()), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    async def _loop(self) -> None:
        import httpx
        from websockets.exceptions import InvalidStatus

        page = f"/evaluations/{self.evaluation_id}/"
        socket = self.server.replace("http://", "ws://") + f"/ws/evaluations/{self.evaluation_id}/"
        headers = {"Cookie": self.cookie}
        async with httpx.AsyncClient(base_url=self.server, headers=headers, timeout=10) as http:
            while not self._stop.is_set():
                for path in (page, f"{page}state/"):
                    self.asked += 1
                    try:
                        response = await http.get(path)
                    except httpx.HTTPError:
                        continue  # no answer at all: the server is down, not a 5xx
                    if response.status_code >= 500:
                        self.errors.append(f"{path} {response.status_code}")
                self.asked += 1
                try:
                    async with harness.page_socket(socket, server=self.server, cookie=self.cookie):
                        pass
                except InvalidStatus as exc:
                    if exc.response.status_code >= 500:
                        self.errors.append(f"socket {exc.response.status_code}")
                except Exception:  # noqa: BLE001, S110 - closed, refused: not a 5xx
                    pass
                await asyncio.sleep(0.25)


@dataclass
class Outcome:
    scenario: str
    finished: bool
    equal: int
    recovered_s: float | None
    errors: list[str]
    deaths: int
    note: str = ""


def _db(read):
    """``read()``, reconnecting while PostgreSQL restarts."""
    from django.db import Error, connections

    deadline = time.monotonic() + 120
    while True:
        try:
            return read()
        except Error:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def start_evaluation(user, name: str):
    from apps.evaluations import services
    from apps.runs.spec import RunSpec, Side

    return services.evaluation_create(
        user=user,
        spec=RunSpec(
            agent=Side(harness.AGENT_MODEL),
            customer=Side(harness.USER_MODEL),
            max_steps=30,
            seed=300,
        ),
        tasks=services.TaskChoice(domain="airline", split="test"),
        num_trials=TRIALS,
        concurrency=8,
        name=name,
    )


def finals(evaluation_id: int) -> int:
    from apps.runs.models import Run

    return _db(
        lambda: Run.objects.filter(evaluation_id=evaluation_id, status__in=Run.FINAL).count()
    )


def wait_completed(evaluation_id: int, *, timeout: float) -> bool:
    from apps.evaluations.models import Evaluation

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = _db(lambda: Evaluation.objects.get(pk=evaluation_id).status)
        if status == Evaluation.Status.COMPLETED:
            return True
        if status in Evaluation.FINAL:
            return False
        time.sleep(0.5)
    return False


def signature(evaluation_id: int) -> dict[tuple[str, int], tuple]:
    """Each run's (status, reward, messages: role, text, tool calls, and whether its
    events' seq are contiguous) by (task, trial)."""
    from apps.runs.models import Run

    def read():
        out = {}
        runs = Run.objects.filter(evaluation_id=evaluation_id).select_related("task")
        for run in runs.prefetch_related("events"):
            events = sorted(run.events.all(), key=lambda e: e.seq)
            messages = tuple(
                (
                    e.message.get("role"),
                    e.message.get("content"),
                    tuple(
                        (c.get("name"), str(c.get("arguments")))
                        for c in e.message.get("tool_calls") or ()
                    ),
                )
                for e in events
            )
            # Every message once, in order: a turn told twice would show here.
            seqs = tuple(e.seq for e in events)
            contiguous = seqs == tuple(range(len(seqs))) or seqs == tuple(range(1, len(seqs) + 1))
            out[(run.task.task_id, run.trial)] = (run.status, run.reward, messages, contiguous)
        return out

    return _db(read)


def page_says_no_worker(server: str, cookie: str, evaluation_id: int) -> tuple[bool, bool]:
    """(``/health/workers`` says none alive, the evaluation page says so)."""
    import httpx

    try:
        health = httpx.get(f"{server}/health/workers", timeout=10)
        page = httpx.get(
            f"{server}/evaluations/{evaluation_id}/", headers={"Cookie": cookie}, timeout=10
        )
    except httpx.HTTPError:
        return False, False
    return health.status_code == 503, "No worker has been alive since" in page.text


def run_scenario(
    scenario: str,
    *,
    stack,
    redis: Redis,
    postgres,
    supervisor: Supervisor,
    person,
    user,
    baseline: dict,
    timeout: float,
) -> Outcome:
    evaluation = start_evaluation(user, f"chaos {scenario}")
    probe = Probe(server=stack.url, cookie=person.cookie, evaluation_id=evaluation.pk)
    probe.start()
    deaths_before = supervisor.deaths - supervisor.kills
    note = ""
    deadline = time.monotonic() + timeout
    while finals(evaluation.pk) < FIRE_AT and time.monotonic() < deadline:
        time.sleep(0.2)
    fired = time.monotonic()
    if scenario == "kill-redis-pg":
        supervisor.kill()
        time.sleep(10)
        redis.restart()
        time.sleep(10)
        postgres.restart()
    elif scenario == "redis-after-ready":
        ready_before = supervisor.ready_at
        supervisor.kill()
        while supervisor.ready_at == ready_before and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(random.uniform(0.2, 0.5))
        replacement = supervisor.worker
        redis.restart()
        time.sleep(15)
        alive = replacement is not None and replacement.proc.poll() is None
        note = "replacement alive" if alive else "replacement exited"
    elif scenario == "no-worker":
        supervisor.stop_worker()
        gone = time.monotonic()
        seen = {"health": None, "page": None}
        while time.monotonic() - gone < 40:
            health, page = page_says_no_worker(stack.url, person.cookie, evaluation.pk)
            for key, said in (("health", health), ("page", page)):
                if said and seen[key] is None:
                    seen[key] = time.monotonic() - gone
            time.sleep(1)
        supervisor.resume()
        note = ", ".join(
            f"{k} said so after {v:.0f} s" if v is not None else f"{k} never said so"
            for k, v in seen.items()
        )
    finished = wait_completed(evaluation.pk, timeout=max(30.0, deadline - time.monotonic()))
    recovered = time.monotonic() - fired if finished else None
    probe.stop()
    got = signature(evaluation.pk)
    equal = sum(1 for key, value in baseline.items() if got.get(key) == value)
    return Outcome(
        scenario=scenario,
        finished=finished,
        equal=equal,
        recovered_s=recovered,
        errors=list(probe.errors),
        deaths=supervisor.deaths - supervisor.kills - deaths_before,  # not the kills
        note=note,
    )


def report(outcomes: list[Outcome], *, baseline_s: float, repetitions: int) -> None:
    print(f"\nbaseline (no fault): {TASKS * TRIALS} runs completed in {baseline_s:.0f} s")
    print(
        f"{'scenario':<20} {'finished':>9} {'equal to baseline':>18} {'recovery s':>14} "
        f"{'5xx':>5} {'other deaths':>14}  notes"
    )
    for scenario in SCENARIOS:
        mine = [o for o in outcomes if o.scenario == scenario]
        if not mine:
            continue
        done = [o for o in mine if o.finished]
        times = sorted(o.recovered_s for o in done if o.recovered_s is not None)
        span = f"{times[0]:.0f}–{times[-1]:.0f}" if times else "–"
        equal = ", ".join(f"{o.equal}/{TASKS * TRIALS}" for o in mine)
        errors = sum(len(o.errors) for o in mine)
        deaths = sum(o.deaths for o in mine)
        notes = "; ".join(sorted({o.note for o in mine if o.note}))
        print(
            f"{scenario:<20} {len(done):>4} of {len(mine):<2} {equal:>18} {span:>14} "
            f"{errors:>5} {deaths:>14}  {notes}"
        )
        for o in mine:
            for error in sorted(set(o.errors))[:5]:
                print(f"    5xx: {error} ×{o.errors.count(error)}")
    del repetitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--scenarios", default="all", help=f"comma-separated of {SCENARIOS}")
    parser.add_argument("--delay", type=float, default=0.7, help="LLM answer delay, seconds")
    parser.add_argument("--timeout", type=float, default=300.0, help="per evaluation")
    args = parser.parse_args()
    chosen = SCENARIOS if args.scenarios == "all" else tuple(args.scenarios.split(","))

    redis = Redis().start()
    postgres = harness.PrivatePostgres()
    database_url = postgres.start()
    try:
        with harness.production_stack(
            database_url=database_url,
            redis_url=redis.url,
            script="bench.evaluations:read_only_script",
            delay=args.delay,
            domains=["airline"],
            settings={
                "TAU2_RUN_LEASE_SECONDS": "15",
                "TAU2_RUN_REAP_SECONDS": "10",
                "TAU2_EVAL_PER_PERSON": "16",
                "TAU2_EVAL_MAX_IN_FLIGHT": "16",
            },
        ) as stack:
            from django.contrib.auth import get_user_model

            schedule = Path(tempfile.mkdtemp(prefix="tau2-chaos-beat-")) / "schedule"
            beat = processes.start_beat(stack.env, schedule=schedule)
            supervisor = Supervisor(stack, threads=8)
            supervisor.start()
            try:
                person = harness.make_people("chaos", 1)[0]
                user = get_user_model().objects.get(pk=person.user_id)
                started = time.monotonic()
                print("baseline …", flush=True)
                evaluation = start_evaluation(user, "chaos baseline")
                if not wait_completed(evaluation.pk, timeout=args.timeout):
                    raise SystemExit("the baseline did not complete")
                baseline_s = time.monotonic() - started
                baseline = signature(evaluation.pk)
                outcomes = []
                for scenario in chosen:
                    for repetition in range(args.repetitions):
                        print(f"{scenario} #{repetition + 1} …", flush=True)
                        outcomes.append(
                            run_scenario(
                                scenario,
                                stack=stack,
                                redis=redis,
                                postgres=postgres,
                                supervisor=supervisor,
                                person=person,
                                user=user,
                                baseline=baseline,
                                timeout=args.timeout,
                            )
                        )
                        print(f"  {outcomes[-1]}", flush=True)
                report(outcomes, baseline_s=baseline_s, repetitions=args.repetitions)
            finally:
                supervisor.close()
                processes.stop(beat)
    finally:
        redis.stop()
        postgres.stop()
        os.environ.pop("DJANGO_SETTINGS_MODULE", None)


if __name__ == "__main__":
    main()

"""Load on model runs: Celery workers, channels_redis and the live page's WebSocket.

Run by hand: ``.venv/bin/python bench/runs_load.py [--runs 20,100] [--workers 1,2]
[--delay 1.0] [--concurrency N]``. Everything listens on 127.0.0.1 only.

It sets up, all of its own (``bench/harness.py``'s ``production_stack``):

* PostgreSQL: by default a private cluster (``initdb`` in a temporary directory, on a
  free port, ``max_connections=500``), because 100 concurrent runs hold about 100
  connections from the workers alone and the shared server allows 100 for everyone;
  ``--database-url`` uses an existing server instead (the database is created if missing).
  Then ``migrate`` and ``load_tasks airline``.
* Redis: ``--redis-url`` (default ``redis://127.0.0.1:6379/11``), its own ``CELERY_QUEUE``
  and ``CHANNELS_PREFIX``.
* The scripted LLM (``tests.support.llm_server``) in a child process, answering every
  call after ``--delay`` seconds and solving airline task 27 (``gold_script`` of
  ``tests.support.scripts``): the
  customer opens, the agent calls ``get_user_details`` then ``send_certificate`` then
  answers, the customer stops. Stateless; it counts the calls per bearer token, and each
  run has its own person and token, so every run's LLM time is known exactly.
* uvicorn serving ``tau2site.asgi:application`` in a subprocess, and 1 or 2
  ``celery -A tau2site worker --pool threads --concurrency N`` processes (N defaults to
  the largest run count divided by the worker count: a run holds a worker thread for
  its whole conversation, so 100 concurrent runs need 100 threads in all).

For each (runs, workers) pair it creates one person per run (token in the vault, a
Django session), starts the runs with ``run_create`` one after the other, and opens one
WebSocket per run as soon as it exists (``/ws/runs/<id>/``, session cookie, Origin =
the server). It measures:

* runs per minute: completed runs / (first ``run_create`` → last final status seen by a
  browser);
* event latency worker → browser (p50/p95) over live events (those after the socket's
  first status message; earlier ones are history replayed on connect): from the
  ``RunEvent`` row's ``created_at`` (set by the worker just before its transaction
  commits), and from the τ² message's own ``timestamp`` (when the worker made it);
  the browser's clock is ``time.time()`` on receipt, on the same machine;
* the platform's share of run time: (run duration − LLM calls × delay) / run duration,
  per run, for the worker's part (``started_at`` → ``finished_at``) and end to end
  (``run_create`` → final status in the browser, which includes the queue);
* errors: runs not completed with reward 1.0, and socket errors.

The baseline is the ideal: every run's LLM calls back to back (calls × delay, 5 s at
1 s) with all runs at once, so ideal runs/min = runs / that time. Anything above it is
the platform's (Celery, Django, PostgreSQL, Redis, the consumer) and τ²'s own CPU time
(orchestrator, litellm, the evaluator), on a machine shared with whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/runs_load.py
from bench import harness  # noqa: E402 - after the path
from bench.harness import AGENT_MODEL, USER_MODEL, Watch, ms  # noqa: E402
from bench.harness import percentile as pct  # noqa: E402

TASK = ("airline", "27")
CONFIG_TIMEOUT_S = 300.0  # per (runs, workers) pair
SAMPLE_INTERVAL_S = 0.5


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ one configuration


@dataclass
class Result:
    runs: int
    workers: int
    concurrency: int
    wall_s: float
    completed: int
    errors: list[str]
    ideal_s: float
    row_latency: list[float]
    msg_latency: list[float]
    to_layer: list[float]
    layer_to_browser: list[float]
    backlog_events: int
    share_worker: list[float]
    share_e2e: list[float]
    queue_wait: list[float]
    scoring: list[float]
    llm_calls: list[int]
    cpu: dict[str, float]
    peak_db_connections: int
    load: tuple[float, float]
    reconnects: int
    drops: dict[str, int]

    @property
    def runs_per_min(self) -> float:
        return self.completed / self.wall_s * 60 if self.wall_s else 0.0

    @property
    def ideal_runs_per_min(self) -> float:
        return self.runs / self.ideal_s * 60


def create_run(user_id: int, prices) -> int:
    from django.contrib.auth import get_user_model

    from apps.runs.services import run_create
    from apps.runs.spec import RunSpec, Side
    from apps.tasks.models import Task

    task = Task.objects.get(domain_id=TASK[0], task_id=TASK[1])
    run = run_create(
        user=get_user_model().objects.get(pk=user_id),
        task=task,
        spec=RunSpec(agent=Side(AGENT_MODEL), customer=Side(USER_MODEL), max_steps=30, seed=7),
        agent_prices=prices,
    )
    return run.pk


class GroupListener:
    """A channel of the bench's own in every run's group: when each ``run.event`` left
    the worker through Redis, to split the latency into worker → layer → browser."""

    def __init__(self) -> None:
        from channels.layers import get_channel_layer

        self.layer = get_channel_layer()
        self.seen: dict[tuple[int, int], float] = {}
        self.errors = 0
        self.channel = ""
        self._stop = False

    async def start(self) -> None:
        self.channel = await self.layer.new_channel()

    async def add(self, run_id: int) -> None:
        from apps.runs.events import group_name

        await self.layer.group_add(group_name(run_id), self.channel)

    async def listen(self, deadline: float) -> None:
        for _ in range(100_000):
            if self._stop or time.monotonic() > deadline:
                return
            try:
                message = await asyncio.wait_for(self.layer.receive(self.channel), timeout=1)
            except TimeoutError:
                continue
            except Exception:  # noqa: BLE001 - redis-py's 5 s read timeout when idle
                self.errors += 1
                continue
            if message.get("type") == "run.event":
                self.seen.setdefault((message["run_id"], message["seq"]), time.time())

    def stop(self) -> None:
        self._stop = True


def db_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


async def run_config(
    *,
    runs: int,
    workers: int,
    concurrency: int,
    delay: float,
    server: str,
    llm: harness.LLMProcess,
    pids: dict[str, list[int]],
    timeout: float,
) -> Result:
    from apps.inference.selectors import offer_price

    tag = f"w{workers}r{runs}"
    people = await asyncio.to_thread(harness.make_people, tag, runs)
    prices = await asyncio.to_thread(
        offer_price, model_id=AGENT_MODEL.split(":")[0], provider=AGENT_MODEL.split(":")[1]
    )
    cpu_before = {name: sum(cpu_seconds(p) for p in ps) for name, ps in pids.items()}
    load_before = os.getloadavg()[0]
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        for _ in range(int(timeout / SAMPLE_INTERVAL_S) + 1):
            if not sampling:
                return
            peak = max(peak, await asyncio.to_thread(db_connections))
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    sampler = asyncio.create_task(sample())
    listener = GroupListener()
    await listener.start()
    listening = asyncio.create_task(listener.listen(time.monotonic() + timeout))
    deadline = time.monotonic() + timeout
    started = time.time()
    watches, tasks = [], []
    # One creator thread: Django's connection is per thread, so runs are created on one.
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=1) as creator:
        for person in people:
            run_id = await loop.run_in_executor(creator, create_run, person.user_id, prices)
            watch = Watch(run_id=run_id, created_at=time.time())
            watches.append(watch)
            await listener.add(run_id)
            tasks.append(
                asyncio.create_task(
                    harness.watch_run(watch, server=server, cookie=person.cookie, deadline=deadline)
                )
            )
        await asyncio.gather(*tasks)
        sampling = False
        await sampler
        listener.stop()
        await listening
        cpu_after = {name: sum(cpu_seconds(p) for p in ps) for name, ps in pids.items()}
        calls = await asyncio.to_thread(llm.calls)
        return await loop.run_in_executor(
            creator,
            _result,
            dict(
                runs=runs,
                workers=workers,
                concurrency=concurrency,
                delay=delay,
                started=started,
                watches=watches,
                people=people,
                calls=calls,
                cpu={k: cpu_after[k] - cpu_before[k] for k in cpu_after},
                peak=peak,
                layer_seen=listener.seen,
                load=(load_before, os.getloadavg()[0]),
            ),
        )


def _ts(value: str) -> float:
    return datetime.fromisoformat(value).timestamp()  # τ²'s naive local time


def _result(a: dict) -> Result:
    from apps.runs.models import Run, RunEvent

    watches: list[Watch] = a["watches"]
    delay: float = a["delay"]
    by_id = {w.run_id: w for w in watches}
    rows = {
        (e.run_id, e.seq): e
        for e in RunEvent.objects.filter(run_id__in=by_id).only(
            "run_id", "seq", "created_at", "message"
        )
    }
    row_latency, msg_latency, backlog = [], [], 0
    to_layer, layer_to_browser = [], []
    for w in watches:
        for seq, at, live in w.events:
            if not live:
                backlog += 1
                continue
            event = rows.get((w.run_id, seq))
            if event is None:
                continue
            row_latency.append(at - event.created_at.timestamp())
            layer_at = a["layer_seen"].get((w.run_id, seq))
            if layer_at is not None:
                to_layer.append(layer_at - event.created_at.timestamp())
                layer_to_browser.append(at - layer_at)
            if event.message.get("timestamp"):
                msg_latency.append(at - _ts(event.message["timestamp"]))
    errors, share_worker, share_e2e, queue_wait, scoring, llm_calls = [], [], [], [], [], []
    last_event = {}
    for (run_id, _seq), event in rows.items():
        last_event[run_id] = max(last_event.get(run_id, 0.0), event.created_at.timestamp())
    runs = Run.objects.filter(pk__in=by_id).select_related("created_by")
    completed = 0
    tokens = {p.user_id: p.token for p in a["people"]}
    for run in runs:
        w = by_id[run.pk]
        n = a["calls"].get(tokens[run.created_by_id], 0)
        llm_calls.append(n)
        ok = run.status == Run.Status.COMPLETED and run.reward == 1.0 and not w.error
        if ok:
            completed += 1
        else:
            errors.append(
                f"run {run.pk}: {run.status} reward={run.reward} "
                f"{(run.error or w.error)[:120]}".rstrip()
            )
        if run.started_at and run.finished_at:
            worked = (run.finished_at - run.started_at).total_seconds()
            share_worker.append((worked - n * delay) / worked)
            queue_wait.append((run.started_at - run.created_at).total_seconds())
            if run.pk in last_event:
                scoring.append(run.finished_at.timestamp() - last_event[run.pk])
        if w.final_at:
            total = w.final_at - w.created_at
            share_e2e.append((total - n * delay) / total)
    finals = [w.final_at for w in watches if w.final_at]
    wall = (max(finals) - a["started"]) if finals else 0.0
    per_run = statistics.median(llm_calls) if llm_calls else 5
    return Result(
        runs=a["runs"],
        workers=a["workers"],
        concurrency=a["concurrency"],
        wall_s=wall,
        completed=completed,
        errors=errors,
        ideal_s=per_run * delay,
        row_latency=row_latency,
        msg_latency=msg_latency,
        to_layer=to_layer,
        layer_to_browser=layer_to_browser,
        backlog_events=backlog,
        share_worker=share_worker,
        share_e2e=share_e2e,
        queue_wait=queue_wait,
        scoring=scoring,
        llm_calls=llm_calls,
        cpu=a["cpu"],
        peak_db_connections=a["peak"],
        load=a["load"],
        reconnects=sum(w.reconnects for w in watches),
        drops=dict(Counter(drop for w in watches for drop in w.drops)),
    )


# ------------------------------------------------------------------ report


def report(results: list[Result], delay: float) -> None:
    print()
    print(f"τ² model runs under load — scripted LLM answering after {delay:g} s, airline/27")
    header = (
        f"{'runs':>4} {'workers×thr':>11} {'wall s':>7} {'runs/min':>8} {'ideal':>6} "
        f"{'ratio':>5} {'evt p50':>7} {'evt p95':>7} {'msg p95':>7} "
        f"{'platform':>8} {'e2e':>5} {'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.runs:>4} {f'{r.workers}×{r.concurrency}':>11} {r.wall_s:>7.1f} "
            f"{r.runs_per_min:>8.1f} {r.ideal_runs_per_min:>6.0f} "
            f"{r.runs_per_min / r.ideal_runs_per_min:>5.2f} "
            f"{ms(pct(r.row_latency, 50)):>7} {ms(pct(r.row_latency, 95)):>7} "
            f"{ms(pct(r.msg_latency, 95)):>7} "
            f"{pct(r.share_worker, 50):>8.0%} {pct(r.share_e2e, 50):>5.0%} "
            f"{r.runs - r.completed:>6}"
        )
    print()
    print(
        "wall: first run_create → last final status in a browser. ideal: runs/min if every\n"
        "run took only its LLM calls back to back (calls × delay), all at once; ratio =\n"
        "runs/min ÷ ideal. evt p50/p95 (ms): RunEvent row created by the worker → the\n"
        "browser received it; msg p95: τ² message made → received. platform: median share\n"
        "of a run's worker time (started → finished) not spent waiting on the LLM; e2e: the\n"
        "same from run_create to the browser's final status (includes the queue).\n"
    )
    for r in results:
        cpu = ", ".join(f"{k} {v:.1f} s ({v / r.runs:.2f}/run)" for k, v in r.cpu.items())
        print(
            f"[{r.runs} runs, {r.workers} worker(s) × {r.concurrency} threads] "
            f"LLM calls/run {min(r.llm_calls, default=0)}–{max(r.llm_calls, default=0)}; "
            f"live events {len(r.row_latency)}, replayed on connect {r.backlog_events}; "
            f"queue wait p50 {pct(r.queue_wait, 50):.2f} s "
            f"max {max(r.queue_wait, default=0):.2f} s; "
            f"scoring (last event → finished) p50 {pct(r.scoring, 50):.2f} s "
            f"p95 {pct(r.scoring, 95):.2f} s; platform share p95 {pct(r.share_worker, 95):.0%}; "
            f"CPU {cpu}; peak PostgreSQL connections {r.peak_db_connections}; "
            f"load average {r.load[0]:.1f} → {r.load[1]:.1f}; "
            f"socket drops (the page reconnects) {r.reconnects}; "
            f"latency split p50/p95 ms: row → channel layer (a listener of the bench) "
            f"{ms(pct(r.to_layer, 50))}/{ms(pct(r.to_layer, 95))}, "
            f"layer → browser {ms(pct(r.layer_to_browser, 50))}/"
            f"{ms(pct(r.layer_to_browser, 95))}"
        )
        for reason, count in sorted(r.drops.items(), key=lambda item: -item[1])[:3]:
            print(f"    drop ×{count}: {reason}")
        for line in r.errors[:5]:
            print(f"    {line}")
        if len(r.errors) > 5:
            print(f"    … and {len(r.errors) - 5} more")


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default="20,100", help="comma-separated run counts")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--delay", type=float, default=1.0, help="LLM answer delay, seconds")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=0,
        help="threads per worker (default: the largest run count ÷ workers)",
    )
    parser.add_argument("--database-url", default="", help="default: a private cluster")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--timeout", type=float, default=CONFIG_TIMEOUT_S)
    args = parser.parse_args()
    run_counts = [int(n) for n in args.runs.split(",")]
    worker_counts = [int(n) for n in args.workers.split(",")]

    with harness.production_stack(
        database_url=args.database_url,
        redis_url=args.redis_url,
        script="tests.support.scripts:gold_script",  # solves airline/27, stateless
        delay=args.delay,
        domains=["airline"],
    ) as stack:
        results = []
        for count in worker_counts:
            concurrency = args.concurrency or math.ceil(max(run_counts) / count)
            workers = stack.start_workers(count=count, concurrency=concurrency)
            pids = {"workers": [w.pid for w in workers], "uvicorn": [stack.web.pid]}
            for runs in run_counts:
                print(f"{runs} runs on {count} worker(s) × {concurrency} threads …", flush=True)
                result = asyncio.run(
                    run_config(
                        runs=runs,
                        workers=count,
                        concurrency=concurrency,
                        delay=args.delay,
                        server=stack.url,
                        llm=stack.llm,
                        pids=pids,
                        timeout=args.timeout,
                    )
                )
                results.append(result)
            stack.stop_workers()
        report(results, args.delay)


if __name__ == "__main__":
    main()

"""Evaluations on the workers: airline/test × 4 trials at several concurrencies, and the
live page of a 2,285-task telecom evaluation.

Run by hand: ``.venv/bin/python bench/evaluations.py [--concurrency 8,16,32]
[--delay 1.0] [--trials 4] [--workers 2]``. Everything listens on 127.0.0.1 only.

It runs on ``bench/harness.py``'s production stack, as ``bench/runs_load.py`` does: a
private PostgreSQL cluster (or ``--database-url``), its own Redis database, queue and
channel prefix, uvicorn serving ``tau2site.asgi:application`` and ``--workers`` ``celery
worker --pool threads`` processes (threads enough for the largest concurrency, plus two).
The scripted LLM runs in a child process and answers every call after ``--delay``
seconds, deterministically and without writing anything: the customer opens, the agent
looks the customer up (``get_user_details``, a read) and declines, the customer ends. So
every run takes the same four LLM calls, and the tasks of airline/test whose right
outcome leaves the database as it was (6, 13, 26, 31, 45, 48) score 1.0 — the
evaluation scores something.

For each concurrency C it starts one evaluation of airline/test (20 tasks) × ``--trials``
with ``evaluation_create`` (one person, the dispatcher's per-person and global caps
raised above C) and measures:

* wall time: the evaluation's ``created_at`` → ``finished_at`` (set by the worker that
  completed it); the LLM-bound ideal is runs × LLM calls per run × delay ÷ C (calls
  counted by the scripted LLM), and the ratio wall ÷ ideal is the figure (1.00 = only
  the LLM's time; the platform's share and the tail of the last wave are the rest).
  "waves" is the same ideal in whole runs: ceil(runs ÷ C) × one run's LLM time;
* event latency to a page: a browser-like socket on the evaluation page
  (``/ws/evaluations/<id>/``) — a run's ``finished_at`` → the first message showing its
  cell final; and sockets on the first four runs' pages (``/ws/runs/<id>/``) — a live
  ``RunEvent`` row's ``created_at`` → received, as ``runs_load`` measures it.

Then the detail page with a big matrix: a COMPLETED telecom evaluation of the 2,285-task
``full`` split × 4 trials (9,140 runs, bulk-created with deterministic random rewards) is
fetched over HTTP from uvicorn (signed in) ``--page-requests`` times: the first request
computes the live state, the rest find it kept (``apps.evaluations.presenters``). The
state is also computed afresh in this process (the cache cleared before each) to show
the cost without the cache, through Django's test client.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/evaluations.py
from bench import harness  # noqa: E402 - after the path
from bench.harness import (  # noqa: E402
    AGENT_MODEL,
    USER_MODEL,
    Watch,
    make_people,
    ms,
    page_socket,
    receive,
    watch_run,
)
from bench.harness import percentile as pct  # noqa: E402
from tests.support.llm_server import ScriptedLLM, text, tool_call  # noqa: E402

RUN_PAGES = 4  # runs whose own page is watched, per evaluation
FINAL_LETTERS = {"c", "f", "s"}


# ------------------------------------------------------------------ the scripted LLM


def read_only_script(llm: ScriptedLLM, *, delay: float) -> None:
    """The read-only scripted LLM (see the module's docstring), for ``harness.LLMProcess``."""

    def responder(request):
        time.sleep(delay)
        tools = request.body.get("tools") or []
        if any(t["function"]["name"] == "get_user_details" for t in tools):
            looked_up = any(
                call["function"]["name"] == "get_user_details"
                for message in request.messages
                if message.get("role") == "assistant"
                for call in message.get("tool_calls") or []
            )
            if not looked_up:
                return tool_call("get_user_details", user_id="mia_li_3668")
            return text("I'm sorry, our policy does not let me change that. Anything else?")
        if "policy does not let me" in request.text():
            return text("I understand. ###STOP###")
        return text("Hi, I'd like some help with my booking. My user id is mia_li_3668.")

    llm.responder = responder


# ------------------------------------------------------------------ one evaluation


@dataclass
class EvaluationWatch:
    """What a browser on the evaluation page saw: when each run's cell turned final."""

    evaluation_id: int
    final_seen: dict[int, float] = field(default_factory=dict)  # run id → time.time()
    messages: int = 0
    drops: list[str] = field(default_factory=list)
    error: str = ""


async def watch_evaluation(watch: EvaluationWatch, *, server: str, cookie: str, deadline: float):
    """Follow the evaluation page's socket as its script does (reconnecting with
    ``?version=``) until the state says final."""
    url = server.replace("http://", "ws://", 1) + f"/ws/evaluations/{watch.evaluation_id}/"
    version = 0
    for attempt in range(harness.MAX_CONNECTIONS):
        if attempt:
            await asyncio.sleep(0.5)
        try:
            async with page_socket(f"{url}?version={version}", server=server, cookie=cookie) as ws:
                while True:
                    received = await receive(ws, deadline)
                    if received is None:
                        watch.error = "timed out"
                        return
                    data, at = received
                    watch.messages += 1
                    version = data.get("version", version)
                    cells = data["matrix"]["cells"] if "matrix" in data else []
                    cells = cells or [cell for _, cell in data.get("patch", [])]
                    for cell in cells:
                        if cell and cell[1] in FINAL_LETTERS:
                            watch.final_seen.setdefault(cell[0], at)
                    if data.get("final"):
                        return
        except TimeoutError:
            watch.error = "timed out"
            return
        except Exception as exc:  # noqa: BLE001 - a drop: reconnect as the page does
            watch.drops.append(f"{type(exc).__name__}: {exc}"[:100])
    watch.error = "gave up reconnecting"


@dataclass
class Result:
    concurrency: int
    runs: int
    wall_s: float
    llm_calls: int
    delay: float
    completed: int
    failed: int
    avg_reward: float
    pass_hat_ks: dict[str, float]
    page_latency: list[float]
    run_latency: list[float]
    page_messages: int
    errors: list[str]

    @property
    def ideal_s(self) -> float:
        return self.llm_calls * self.delay / self.concurrency

    @property
    def waves_s(self) -> float:
        """The ideal with whole runs: ceil(runs ÷ concurrency) waves of one run's calls."""
        return math.ceil(self.runs / self.concurrency) * self.calls_per_run * self.delay

    @property
    def calls_per_run(self) -> float:
        return self.llm_calls / self.runs if self.runs else 0.0


def run_evaluation(
    *,
    concurrency: int,
    trials: int,
    delay: float,
    server: str,
    llm: harness.LLMProcess,
    timeout: float,
) -> Result:
    from django.contrib.auth import get_user_model

    from apps.evaluations import services
    from apps.evaluations.models import Evaluation
    from apps.inference.selectors import offer_price
    from apps.runs.models import Run, RunEvent
    from apps.runs.spec import RunSpec, Side

    person = make_people(f"eval-c{concurrency}", 1)[0]
    prices = offer_price(model_id=AGENT_MODEL.split(":")[0], provider=AGENT_MODEL.split(":")[1])
    evaluation = services.evaluation_create(
        user=get_user_model().objects.get(pk=person.user_id),
        spec=RunSpec(agent=Side(AGENT_MODEL), customer=Side(USER_MODEL), max_steps=30, seed=300),
        tasks=services.TaskChoice(domain="airline", split="test"),
        agent_prices=prices,
        num_trials=trials,
        concurrency=concurrency,
        name=f"bench c{concurrency}",
    )
    run_ids = list(evaluation.runs.order_by("trial", "id").values_list("id", flat=True)[:RUN_PAGES])
    deadline = time.monotonic() + timeout
    page = EvaluationWatch(evaluation_id=evaluation.pk)
    runs_watched = [Watch(run_id=run_id, created_at=time.time()) for run_id in run_ids]

    async def browse() -> None:
        await asyncio.gather(
            watch_evaluation(page, server=server, cookie=person.cookie, deadline=deadline),
            *(
                watch_run(w, server=server, cookie=person.cookie, deadline=deadline)
                for w in runs_watched
            ),
        )

    browser = threading.Thread(target=lambda: asyncio.run(browse()), name="browser")
    browser.start()
    while time.monotonic() < deadline:
        evaluation.refresh_from_db()
        if evaluation.is_final:
            break
        time.sleep(0.5)
    browser.join(timeout=max(1.0, deadline - time.monotonic()))

    errors = []
    if evaluation.status != Evaluation.Status.COMPLETED:
        errors.append(f"evaluation {evaluation.status} {evaluation.error}".strip())
    runs = list(evaluation.runs.values("id", "status", "reward", "finished_at", "error"))
    for run in runs:
        if run["status"] != Run.Status.COMPLETED:
            errors.append(f"run {run['id']}: {run['status']} {run['error'][:120]}".rstrip())
    page_latency = [
        page.final_seen[run["id"]] - run["finished_at"].timestamp()
        for run in runs
        if run["finished_at"] and run["id"] in page.final_seen
    ]
    if page.error:
        errors.append(f"evaluation page: {page.error}")
    created = {
        (e.run_id, e.seq): e.created_at.timestamp()
        for e in RunEvent.objects.filter(run_id__in=run_ids).only("run_id", "seq", "created_at")
    }
    run_latency = [
        at - created[(w.run_id, seq)]
        for w in runs_watched
        for seq, at, live in w.events
        if live and (w.run_id, seq) in created
    ]
    finished = evaluation.finished_at or evaluation.created_at
    summary = evaluation.summary or {}
    return Result(
        concurrency=concurrency,
        runs=len(runs),
        wall_s=(finished - evaluation.created_at).total_seconds(),
        llm_calls=llm.calls().get(person.token, 0),
        delay=delay,
        completed=sum(1 for r in runs if r["status"] == Run.Status.COMPLETED),
        failed=sum(1 for r in runs if r["status"] == Run.Status.FAILED),
        avg_reward=summary.get("avg_reward") or 0.0,
        pass_hat_ks=summary.get("pass_hat_ks") or {},
        page_latency=page_latency,
        run_latency=run_latency,
        page_messages=page.messages,
        errors=errors,
    )


# ------------------------------------------------------------------ the big page


def telecom_evaluation() -> tuple[int, int, str]:
    """A COMPLETED evaluation of telecom's ``full`` split × 4 trials, bulk-created:
    returns its id, its number of runs and its owner's session cookie."""
    from django.utils import timezone

    from apps.evaluations import selectors
    from apps.evaluations.models import Evaluation
    from apps.runs.models import Run
    from apps.tasks.models import Task
    from tau2_env.engine import catalog
    from tau2_env.engine.evaluation import trial_seeds

    person = make_people("page", 1)[0]
    ids = list(catalog.get_domain("telecom").splits["full"])
    tasks = {t.task_id: t for t in Task.objects.filter(domain_id="telecom", task_id__in=ids)}
    trials, seeds = 4, trial_seeds(300, 4)
    now = timezone.now()
    evaluation = Evaluation.objects.create(
        name="bench telecom full",
        status=Evaluation.Status.COMPLETED,
        created_by_id=person.user_id,
        finished_at=now,
        domain="telecom",
        split="full",
        full_split=True,
        task_ids=ids,
        agent_model=AGENT_MODEL,
        agent_provider=AGENT_MODEL.split(":")[1],
        user_model=USER_MODEL,
        num_trials=trials,
        seed=300,
        trial_seeds=seeds,
        concurrency=32,
        provenance={"source": "bench", "agent_prices": ["0.27", "1.1"]},
    )
    rng = random.Random(7)  # noqa: S311 - made-up outcomes
    difficulty = {task_id: rng.random() for task_id in ids}
    runs = []
    for trial in range(trials):
        for task_id in ids:
            reward = 1.0 if rng.random() < difficulty[task_id] else 0.0
            started = now - timedelta(seconds=rng.randint(60, 3600))
            prompt, completion = rng.randint(5_000, 60_000), rng.randint(300, 3_000)
            runs.append(
                Run(
                    task=tasks[task_id],
                    domain="telecom",
                    created_by_id=person.user_id,
                    agent_model=AGENT_MODEL,
                    agent_provider=AGENT_MODEL.split(":")[1],
                    user_model=USER_MODEL,
                    max_steps=200,
                    seed=seeds[trial],
                    evaluation=evaluation,
                    trial=trial,
                    status=Run.Status.COMPLETED,
                    dispatched_at=started,
                    started_at=started,
                    finished_at=started + timedelta(seconds=rng.randint(20, 300)),
                    termination_reason=rng.choice(["user_stop", "user_stop", "max_steps"]),
                    reward=reward,
                    reward_info={
                        "reward": reward,
                        "reward_breakdown": {"DB": reward, "COMMUNICATE": 1.0},
                    },
                    n_messages=rng.randint(8, 60),
                    n_tool_calls=rng.randint(1, 20),
                    prompt_tokens=prompt,
                    completion_tokens=completion,
                    cost_usd=(
                        Decimal(prompt) * Decimal("0.27") + Decimal(completion) * Decimal("1.1")
                    )
                    / Decimal(1_000_000),
                    provenance={"source": "bench"},
                )
            )
    Run.objects.bulk_create(runs, batch_size=2000)
    evaluation.summary = selectors.evaluation_metrics(evaluation)
    evaluation.save(update_fields=["summary"])
    return evaluation.pk, len(runs), person.cookie


@dataclass
class PageResult:
    runs: int
    bytes: int
    first_s: float
    warm: list[float]
    cold: list[float]
    selectors: list[float]


def time_page(*, server: str, requests: int, cold: int) -> PageResult:
    from django.core.cache import cache
    from django.test import Client

    from apps.evaluations import selectors
    from apps.evaluations.models import Evaluation

    evaluation_id, runs, cookie = telecom_evaluation()
    path = f"/evaluations/{evaluation_id}/"

    def fetch() -> tuple[float, int]:
        request = urllib.request.Request(server + path, headers={"Cookie": cookie})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            if response.status != 200:
                raise SystemExit(f"GET {path}: {response.status}")
        return time.perf_counter() - started, len(body)

    first, size = fetch()  # computes the live state and keeps it
    warm = [fetch()[0] for _ in range(requests)]

    evaluation = Evaluation.objects.get(pk=evaluation_id)
    client = Client()
    client.force_login(evaluation.created_by)
    cold_times = []
    for _ in range(cold):
        cache.clear()
        started = time.perf_counter()
        response = client.get(path)
        cold_times.append(time.perf_counter() - started)
        assert response.status_code == 200, response.status_code
    selector_times = []
    for _ in range(cold):
        started = time.perf_counter()
        rows = selectors.evaluation_runs(evaluation)
        selectors.evaluation_metrics(evaluation, rows)
        selectors.evaluation_matrix(evaluation, rows)
        selector_times.append(time.perf_counter() - started)
    return PageResult(
        runs=runs, bytes=size, first_s=first, warm=warm, cold=cold_times, selectors=selector_times
    )


# ------------------------------------------------------------------ report


def report(results: list[Result], page: PageResult | None, *, workers: int, threads: int) -> None:
    print()
    delay = results[0].delay if results else 0
    print(
        f"τ² evaluations on the workers — airline/test × {results[0].runs // 20 if results else 0}"
        f" trials, scripted LLM answering after {delay:g} s, {workers} worker processes × "
        f"{threads} threads"
    )
    header = (
        f"{'conc':>4} {'runs':>4} {'calls/run':>9} {'wall s':>7} {'ideal s':>7} {'ratio':>5} "
        f"{'waves s':>7} "
        f"{'page p50':>8} {'page p95':>8} {'evt p50':>7} {'evt p95':>7} "
        f"{'avg rwd':>7} {'pass^1':>6} {'pass^4':>6} {'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r.concurrency:>4} {r.runs:>4} {r.calls_per_run:>9.2f} {r.wall_s:>7.1f} "
            f"{r.ideal_s:>7.1f} {r.wall_s / r.ideal_s if r.ideal_s else math.nan:>5.2f} "
            f"{r.waves_s:>7.1f} "
            f"{ms(pct(r.page_latency, 50)):>8} {ms(pct(r.page_latency, 95)):>8} "
            f"{ms(pct(r.run_latency, 50)):>7} {ms(pct(r.run_latency, 95)):>7} "
            f"{r.avg_reward:>7.3f} {r.pass_hat_ks.get('1', math.nan):>6.3f} "
            f"{r.pass_hat_ks.get('4', math.nan):>6.3f} {len(r.errors):>6}"
        )
    print()
    print(
        "wall: the evaluation's created_at → finished_at. ideal: runs × LLM calls per run ×\n"
        "delay ÷ concurrency (only the LLM's time, every slot always busy); ratio = wall ÷\n"
        "ideal. waves: the ideal in whole runs, ceil(runs ÷ concurrency) × one run's LLM time\n"
        "(at 32, 80 runs make three waves, not 2.5). page p50/p95 (ms): a run's finished_at →\n"
        "the evaluation page's socket shows its cell final (every run). evt p50/p95 (ms):\n"
        f"the first {RUN_PAGES} runs' pages, a live RunEvent row created → received. pass^k:\n"
        "τ²'s, over the evaluation's tasks.\n"
    )
    for r in results:
        print(
            f"[concurrency {r.concurrency}] completed {r.completed}, failed {r.failed}; "
            f"evaluation page messages {r.page_messages}, cells seen final "
            f"{len(r.page_latency)}/{r.runs}; live run events {len(r.run_latency)}"
        )
        for line in r.errors[:5]:
            print(f"    {line}")
        if len(r.errors) > 5:
            print(f"    … and {len(r.errors) - 5} more")
    if page is None:
        return
    print()
    print(
        f"Detail page of a completed telecom full-split evaluation: {page.runs} runs "
        f"({page.runs // 4} tasks × 4), page {page.bytes / 1024:.0f} KiB"
    )
    rows = [
        ("GET over HTTP, state kept", page.warm),
        ("GET via test client, state computed (cache cleared)", page.cold),
        ("selectors: runs + metrics + matrix", page.selectors),
    ]
    print(f"{'':<52} {'n':>3} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
    print(f"{'GET over HTTP, first (computes the state)':<52} {1:>3} {ms(page.first_s):>7}")
    for label, values in rows:
        print(
            f"{label:<52} {len(values):>3} {ms(pct(values, 50)):>7} {ms(pct(values, 95)):>7} "
            f"{ms(max(values, default=math.nan)):>7}"
        )
    verdict = "met" if pct(page.warm, 95) <= 0.2 else "NOT met"
    print(f"target p95 ≤ 200 ms over HTTP: {verdict}")


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="8,16,32", help="comma-separated")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--delay", type=float, default=1.0, help="LLM answer delay, seconds")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes")
    parser.add_argument("--threads", type=int, default=0, help="per worker (default: enough)")
    parser.add_argument("--page-requests", type=int, default=30)
    parser.add_argument("--cold-requests", type=int, default=10)
    parser.add_argument("--no-page", action="store_true", help="skip the telecom page")
    parser.add_argument("--database-url", default="", help="default: a private cluster")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--timeout", type=float, default=600.0, help="per evaluation")
    args = parser.parse_args()
    concurrencies = [int(n) for n in args.concurrency.split(",")]
    threads = args.threads or math.ceil(max(concurrencies) / args.workers) + 2
    caps = str(max(concurrencies) * 2)  # one person's evaluation may use every slot asked for

    with harness.production_stack(
        database_url=args.database_url,
        redis_url=args.redis_url,
        script="bench.evaluations:read_only_script",
        delay=args.delay,
        domains=["airline", "telecom"],
        settings={"TAU2_EVAL_PER_PERSON": caps, "TAU2_EVAL_MAX_IN_FLIGHT": caps},
    ) as stack:
        stack.start_workers(count=args.workers, concurrency=threads)
        results = []
        for concurrency in concurrencies:
            print(f"evaluation at concurrency {concurrency} …", flush=True)
            results.append(
                run_evaluation(
                    concurrency=concurrency,
                    trials=args.trials,
                    delay=args.delay,
                    server=stack.url,
                    llm=stack.llm,
                    timeout=args.timeout,
                )
            )
        page = None
        if not args.no_page:
            print("telecom full × 4 evaluation page …", flush=True)
            page = time_page(server=stack.url, requests=args.page_requests, cold=args.cold_requests)
        report(results, page, workers=args.workers, threads=threads)


if __name__ == "__main__":
    main()

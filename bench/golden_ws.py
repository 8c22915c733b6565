"""Golden replays through the OpenEnv WebSocket API, one after another, timed per domain.

Run by hand: ``.venv/bin/python bench/golden_ws.py [--telecom 20] [--domains
airline,retail,telecom]``. Everything listens on 127.0.0.1 only.

It serves the product's ASGI app with uvicorn (``bench/harness.py``, as
``bench/openenv_load.py`` serves it) and a
scripted customer (``tests/support/trajectories.py``: it opens, runs telecom's phone
actions when asked, and acknowledges) answering at once. Then, for every task of each
domain's base split (telecom: the first ``--telecom`` tasks), one client (the original Space's
``Tau2Env``) resets, plays the task's expected actions with ``call_tool``, tells the
must-tell information with ``respond_to_user`` and calls ``done`` — the same path as the
faithfulness tests over ``/ws``. Each must score 1.0. It prints the wall time per domain,
per task, and the ratio to issue 9's targets (airline 10 s, retail 15 s, telecom 11 s;
before: 38, 60, 60 s).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/golden_ws.py
from bench import harness  # noqa: E402 - after the path
from tests.support.processes import stop  # noqa: E402

TOKEN = "hf_golden_bench_token_0123456789"  # noqa: S105 - the scripted LLM's fake token
TARGETS = {"airline": 10.0, "retail": 15.0, "telecom": 11.0}
BEFORE = {"airline": 38.0, "retail": 60.0, "telecom": 60.0}


async def replay(base_url: str, llm, domain: str, task_ids: list[str]) -> list[float]:
    from tau2_env import Tau2Env
    from tau2_env.engine import catalog
    from tests.support.llm_server import text
    from tests.support.trajectories import CUSTOMER_OPENING, CustomerScript, drive_api

    customer = CustomerScript(llm)
    times = []
    async with Tau2Env(base_url=base_url) as env:
        for task_id in task_ids:
            task = catalog.get_tau2_task(domain, task_id)
            customer.planned.clear()
            customer.will(text(CUSTOMER_OPENING))
            started = time.perf_counter()
            await env.reset(domain=domain, split="base", task_id=task_id, hf_token=TOKEN)
            final = await drive_api(env, task, customer)
            times.append(time.perf_counter() - started)
            if final.reward != 1.0:
                raise SystemExit(f"{domain}/{task_id} scored {final.reward}, not 1.0")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", default="airline,retail,telecom")
    parser.add_argument("--telecom", type=int, default=20, help="telecom base tasks to replay")
    args = parser.parse_args()

    from tau2_env.engine import catalog
    from tests.support.llm_server import ScriptedLLM

    llm = ScriptedLLM()
    llm.start()
    with tempfile.TemporaryDirectory() as var_dir:
        env = harness.openenv_environment(llm.base_url, 8, var_dir)
        server = harness.start_openenv(env)
        try:
            rows = []
            for domain in args.domains.split(","):
                ids = list(catalog.get_domain(domain).splits["base"])
                if domain == "telecom":
                    ids = ids[: args.telecom]
                started = time.perf_counter()
                times = asyncio.run(replay(server.url, llm, domain, ids))
                rows.append((domain, len(ids), time.perf_counter() - started, times))
                llm.requests.clear()
        finally:
            stop(server)
            llm.stop()
    print("\nGolden replays through /ws, sequential, scripted customer answering at once")
    print(
        f"{'domain':<8} {'tasks':>5} {'wall s':>7} {'p50 ms':>7} {'max ms':>7} "
        f"{'target s':>8} {'ratio':>5} {'before s':>8}"
    )
    for domain, count, wall, times in rows:
        print(
            f"{domain:<8} {count:>5} {wall:>7.1f} {statistics.median(times) * 1000:>7.0f} "
            f"{max(times) * 1000:>7.0f} {TARGETS.get(domain, float('nan')):>8.0f} "
            f"{wall / TARGETS.get(domain, float('nan')):>5.2f} "
            f"{BEFORE.get(domain, float('nan')):>8.0f}"
        )


if __name__ == "__main__":
    main()

"""One GRPO batch of τ²-bench rollouts through the TRL environment, in TRL's two orders.

Run by hand: ``.venv/bin/python bench/trl_batch.py [--rollouts 8,32] [--delay 1]``.
Everything listens on 127.0.0.1 only: the product's OpenEnv server (``bench/harness.py``)
and the scripted customer of airline/27 (``tests.support.scripts:gold_script``) answering
after ``--delay`` seconds.

Each rollout is the golden episode of airline/27 played by
``tau2_env.faces.trl_environment.tau2_environment(domain="airline")`` (τ²'s expected actions,
then ``respond_to_user``, then ``get_reward``), and must score 1.0. Two orders:

* **GRPOTrainer** (TRL 1.16): every ``reset`` one after another, then each round of tool
  calls rollout by rollout (``_tool_call_loop`` calls them in turn, sync or async), then
  every ``get_reward`` in turn;
* **AsyncGRPOTrainer** (TRL's experimental one): the rollouts side by side, each on a
  thread of its pool.

It prints the wall time of the batch in each order.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/trl_batch.py
from bench import harness  # noqa: E402 - after the path
from tau2_env.faces.trl_environment import tau2_environment  # noqa: E402
from tests.support.processes import stop  # noqa: E402

TOKEN = "hf_trl_bench_token_0123456789"  # noqa: S105 - the scripted LLM's fake token
GOLD_USER = "ethan_martin_2396"
ROW = {"domain": "airline", "task_id": "27", "split": "base", "seed": 0}
ACTIONS = [  # τ²'s expected actions of airline/27, then the answer the customer ends on
    ("get_user_details", {"user_id": GOLD_USER}),
    ("send_certificate", {"user_id": GOLD_USER, "amount": 150}),
    ("respond_to_user", {"message": "I have sent you a $150 certificate."}),
]


def in_turn(envs) -> list:
    """GRPOTrainer's order: each stage over every rollout, one rollout after another."""
    for env in envs:
        env.reset(**ROW)
    for name, arguments in ACTIONS:
        for env in envs:
            getattr(env, name)(**arguments)
    return [env.get_reward() for env in envs]


def side_by_side(envs) -> list:
    """AsyncGRPOTrainer's: each rollout on its own thread."""

    def rollout(env):
        env.reset(**ROW)
        for name, arguments in ACTIONS:
            getattr(env, name)(**arguments)
        return env.get_reward()

    with ThreadPoolExecutor(max_workers=len(envs)) as pool:
        return list(pool.map(rollout, envs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", default="8,32")
    parser.add_argument("--delay", type=float, default=1.0, help="the customer's seconds")
    args = parser.parse_args()
    sizes = [int(n) for n in args.rollouts.split(",")]

    llm = harness.LLMProcess("tests.support.scripts:gold_script", delay=args.delay)
    with tempfile.TemporaryDirectory() as var_dir:
        env = harness.openenv_environment(llm.base_url, max(sizes), var_dir)
        env["HF_TOKEN"] = TOKEN  # the server's own token runs the customer
        server = harness.start_openenv(env)
        try:
            os.environ["TAU2_URL"] = server.url
            cls = tau2_environment(domain="airline")
            print(f"customer answers after {args.delay:.1f} s; rollout = airline/27 golden")
            print("| rollouts | GRPOTrainer order | AsyncGRPOTrainer order |")
            print("|---|---|---|")
            for n in sizes:
                envs = [cls() for _ in range(n)]
                walls = []
                for order in (in_turn, side_by_side):
                    started = time.perf_counter()
                    rewards = order(envs)
                    walls.append(time.perf_counter() - started)
                    if rewards != [1.0] * n:
                        raise SystemExit(f"{order.__name__}: rewards {rewards}")
                print(f"| {n} | {walls[0]:.1f} s | {walls[1]:.1f} s |", flush=True)
                for e in envs:
                    e._close()
        finally:
            stop(server)
            llm.stop()


if __name__ == "__main__":
    main()

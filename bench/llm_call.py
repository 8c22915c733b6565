"""CPU per LLM call: litellm's path against the direct path (``tau2_env.llm.compat.DirectPath``).

Run by hand: ``.venv/bin/python bench/llm_call.py [--calls 400] [--rounds 5]
[--messages 12]``.

It starts the scripted LLM (``bench/harness.py``'s ``LLMProcess``, answering at once, in
a process of its own) and makes the same chat call — a customer's: τ²'s user-simulator
system prompt stand-in and ``--messages`` turns — through ``routed_completion`` inside a
conversation, as τ² makes it, ``--calls`` times per round, alternating the two paths
(``TAU2_LLM_DIRECT`` off, then on) for ``--rounds`` rounds. It prints the CPU
(``time.process_time`` of this process: the server is another) per call of each path,
the median over rounds, and the ratio. Every direct round is checked: all its calls
went direct. Each round ends 1.5 s after its last call (process CPU included): litellm
finishes each call's logging on threads of its own, and that CPU is its calls' too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/llm_call.py
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The scripted LLM listens on loopback, which the outbound policy refuses unless allowed.
os.environ.setdefault("TAU2_OUTBOUND_ALLOW", "127.0.0.0/8,::1,localhost")
from bench.harness import USER_MODEL, LLMProcess  # noqa: E402 - after the path

SETTLE_S = 1.5
TOKEN = "hf_bench_0_llmcall0123456789"  # noqa: S105 - the scripted LLM's fake token


def conversation(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a customer of an airline. " * 40}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": f"Turn {i}: " + "some words " * 20})
    return messages


def one_round(*, calls: int, messages: list[dict], direct: bool, warm: bool = False) -> float:
    from tau2_env.llm import compat, gateway

    os.environ["TAU2_LLM_DIRECT"] = "on" if direct else "off"
    before = dict(compat.DIRECT.counts)
    started = time.process_time()
    for _ in range(calls):
        gateway.routed_completion(
            model=USER_MODEL, messages=[dict(m) for m in messages], tools=None, tool_choice=None
        )
    # litellm finishes each call's logging on threads of its own: that CPU is its calls'
    # too, so the round ends once they are done (the process is idle otherwise).
    time.sleep(SETTLE_S)
    spent = time.process_time() - started
    if direct and not warm:
        went = compat.DIRECT.counts["direct"] - before["direct"]
        if went != calls:
            raise SystemExit(f"only {went} of {calls} calls went by the direct path")
    return spent / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=12)
    args = parser.parse_args()

    server = LLMProcess("bench.openenv_load:token_delays", delay=0.0)
    try:
        from tau2_env.llm import compat, gateway

        compat.install()
        route = gateway.Route(
            provider="hf", model=USER_MODEL, base_url=server.base_url, api_key=TOKEN
        )
        messages = conversation(args.messages)
        results: dict[bool, list[float]] = {False: [], True: []}
        with gateway.conversation(user=route):
            for direct in (False, True):  # warm both paths, and the direct path's check
                one_round(calls=20, messages=messages, direct=direct, warm=True)
            for _ in range(args.rounds):
                for direct in (False, True):
                    results[direct].append(
                        one_round(calls=args.calls, messages=messages, direct=direct)
                    )
    finally:
        server.stop()
    litellm_ms = statistics.median(results[False]) * 1000
    direct_ms = statistics.median(results[True]) * 1000
    print(
        f"CPU per call, {args.messages + 1} messages, {args.calls} calls x {args.rounds} rounds "
        f"({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}):"
    )
    for name, ms, rounds in (
        ("litellm    ", litellm_ms, results[False]),
        ("direct path", direct_ms, results[True]),
    ):
        print(f"  {name}  {ms:6.2f} ms   rounds {[round(x * 1000, 2) for x in rounds]}")
    print(f"  ratio        {direct_ms / litellm_ms:6.3f}  (direct / litellm)")


if __name__ == "__main__":
    main()

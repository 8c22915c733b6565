"""Issue 30's outbound probes, measured: a model call against an endpoint that trickles
one byte every 2 s (the Test's way: no retry, ``TAU2_CONNECTION_TEST_TIMEOUT``'s 15 s),
and the process's RSS around a call answered with 300 MB (chunked, and with its
Content-Length), with the default size cap.

    .venv/bin/python bench/outbound.py [--trickle-timeout 15] [--size-mb 300]

Prints seconds and MB; run by hand (it takes about the timeout).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TAU2_OUTBOUND_ALLOW", "127.0.0.0/8")

from tau2_env.llm import compat, gateway  # noqa: E402
from tests.support.hostile_endpoint import Behaviour, HostileEndpoint  # noqa: E402


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _call(endpoint: HostileEndpoint, timeout: float) -> str:
    route = gateway.Route(
        provider="openai_compatible",
        model="m",
        base_url=endpoint.base_url,
        api_key="sk-bench-0123456789",
        timeout=timeout,
        label="bench",
    )
    call = gateway.litellm_kwargs(route)
    # One attempt, as the Test calls (litellm_kwargs gives litellm no retries).
    try:
        gateway.litellm.completion(messages=[{"role": "user", "content": "hi"}], **call)
    except Exception as exc:  # noqa: BLE001 - what it was is the measurement
        return gateway.explain_error(exc, route=route).kind
    return "answered"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trickle-timeout", type=float, default=15.0)
    parser.add_argument("--size-mb", type=int, default=300)
    args = parser.parse_args()
    compat.install()
    with HostileEndpoint() as endpoint:
        # litellm's first call in a process loads its provider modules (seconds): not
        # the endpoint's time.
        endpoint.behaviour = Behaviour("trickle", interval=2.0)
        _call(endpoint, 1.0)
        endpoint.behaviour = Behaviour("trickle", interval=2.0)
        started = time.monotonic()
        kind = _call(endpoint, args.trickle_timeout)
        print(
            f"trickle 1 byte/2 s, timeout {args.trickle_timeout:g} s: "
            f"{time.monotonic() - started:.1f} s ({kind})"
        )
        for chunked in (False, True):
            endpoint.behaviour = Behaviour("huge", size=args.size_mb * 1024 * 1024, chunked=chunked)
            before = _rss_mb()
            started = time.monotonic()
            kind = _call(endpoint, 120.0)
            print(
                f"{args.size_mb} MB reply ({'chunked' if chunked else 'Content-Length'}): "
                f"RSS {before:.0f} -> {_rss_mb():.0f} MB (+{_rss_mb() - before:.0f}), "
                f"{time.monotonic() - started:.2f} s ({kind})"
            )


if __name__ == "__main__":
    main()

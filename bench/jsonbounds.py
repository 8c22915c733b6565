"""How long the bounded JSON reader (``tau2_env.jsonbounds``) takes beside ``json.loads``.

Two measurements, each the median of ``--repetitions`` runs:

* a results-shaped file of ``--mib`` MiB (τ²'s messages, as an import reads them): the
  bounded reader's time, json's, and their ratio (the reader checks depth, integers and
  strings before json parses; measured on a busy 2-core machine: about 1.4×);
* documents nested 1,000,000 levels deep: the time to refuse them (before any parsing).

    .venv/bin/python bench/jsonbounds.py --mib 100 --repetitions 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tau2_env.jsonbounds import JsonRefused, loads  # noqa: E402
from tests.tau2_env.test_jsonbounds import large_results_like  # noqa: E402

MiB = 1024 * 1024


def _seconds(func) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started


def _refuse(text: str) -> None:
    try:
        loads(text, max_bytes=len(text.encode()) + 1)
    except JsonRefused:
        return
    raise SystemExit("a document nested 1,000,000 levels deep was read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    data = large_results_like(args.mib * MiB)
    plain = statistics.median(_seconds(lambda: json.loads(data)) for _ in range(args.repetitions))
    bounded = statistics.median(
        _seconds(lambda: loads(data, max_bytes=len(data))) for _ in range(args.repetitions)
    )
    deep = "[" * 1_000_000
    refused = statistics.median(_seconds(lambda: _refuse(deep)) for _ in range(args.repetitions))
    print(f"results-shaped file: {len(data) / MiB:.0f} MiB")
    print(f"  json.loads         {plain:7.3f} s")
    print(f"  jsonbounds.loads   {bounded:7.3f} s   ratio {bounded / plain:.2f}× json")
    print(f"1,000,000 levels deep: refused in {refused * 1000:.1f} ms")


if __name__ == "__main__":
    main()

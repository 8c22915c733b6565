"""Server time of the task explorer and the tasks API over telecom's 2,285-task split.

Run by hand: ``make bench`` or ``.venv/bin/python bench/explorer.py [--rounds N]``.
For each backend (SQLite under a temporary folder; PostgreSQL at BENCH_PG_URL, default
postgres://postgres@127.0.0.1:5432/tau2_bench, created if missing) it migrates, loads
the catalogue, warms up, then times every request in-process with Django's test client
(server time: routing, queries, templates; no network). Prints p50/p95 per surface and
the ratio of p95 to the 50 ms target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # python bench/explorer.py
from bench.harness import ensure_database, percentile_rounded  # noqa: E402 - after the path

TARGET_MS = 50.0
SEARCHES = [
    {},
    {"q": "roaming"},
    {"q": "mobile data"},
    {"q": "mms"},
    {"q": "airplane"},
    {"q": "refuel_data"},
    {"q": "[service_issue]"},
    {"q": "persona:easy"},
    {"q": "no such words anywhere"},
    {"kind": "write"},
    {"kind": "read"},
    {"q": "data", "kind": "write"},
    {"page": "20"},
    {"q": "roaming", "page": "5"},
]


def measure(rounds: int) -> dict:
    """In the child process: time the explorer (page and htmx fragment) and the API."""
    import django

    django.setup()
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    call_command("load_tasks", "telecom", verbosity=0)
    client = Client()
    base = {"domain": "telecom", "split": "full"}
    surfaces = {
        "explorer page": lambda p: client.get("/tasks/", {**base, **p}),
        "explorer htmx": lambda p: client.get("/tasks/", {**base, **p}, HTTP_HX_REQUEST="true"),
        "api tasks": lambda p: client.get(
            "/api/tasks/", {**base, **p, "limit": 48, "offset": 48 * (int(p.get("page", 1)) - 1)}
        ),
    }
    results = {}
    for name, call in surfaces.items():
        for params in SEARCHES:  # warm-up: connections, template and query caches
            assert call(params).status_code == 200
        samples = []
        for _ in range(rounds):
            for params in SEARCHES:
                start = time.perf_counter()
                response = call(params)
                samples.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, (name, params, response.status_code)
        results[name] = {
            "n": len(samples),
            "p50": statistics.median(samples),
            "p95": percentile_rounded(samples, 95),
            "max": max(samples),
        }
    from django.db import connection

    results["_vendor"] = connection.vendor
    return results


def run_child(backend: str, rounds: int) -> dict:
    environ = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    environ.update(
        DJANGO_SETTINGS_MODULE="tau2site.settings",
        DJANGO_SECRET_KEY="bench-only-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz",  # noqa: S106
        DEBUG="false",
        ALLOWED_HOSTS="testserver",
        SECURE_SSL_REDIRECT="false",
        LOG_LEVEL="WARNING",
        TAU2_EMBEDDED_WORKER="false",
        TAU2_VAULT_KEYS=Fernet.generate_key().decode(),  # no token is stored here
    )
    tmp = tempfile.mkdtemp(prefix="tau2-bench-")
    environ["TAU2_VAR_DIR"] = tmp
    if backend == "postgresql":
        url = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/tau2_bench")
        ensure_database(url)
        environ["DATABASE_URL"] = url
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--rounds", str(rounds)],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{backend} benchmark failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="passes over the searches")
    parser.add_argument("--backend", choices=["sqlite", "postgresql"], action="append")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.rounds)))
        return

    print(
        f"Explorer and API server time over telecom/full (2,285 tasks), "
        f"{len(SEARCHES)} queries x {args.rounds} rounds; target p95 <= {TARGET_MS:.0f} ms"
    )
    print(
        f"{'backend':<11} {'surface':<14} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} "
        f"{'p95/target':>10}"
    )
    worst = 0.0
    for backend in args.backend or ["sqlite", "postgresql"]:
        results = run_child(backend, args.rounds)
        for surface, r in results.items():
            if surface.startswith("_"):
                continue
            ratio = r["p95"] / TARGET_MS
            worst = max(worst, ratio)
            print(
                f"{backend:<11} {surface:<14} {r['n']:>5} {r['p50']:>8.1f} {r['p95']:>8.1f} "
                f"{r['max']:>8.1f} {ratio:>10.2f}"
            )
    print(f"worst p95/target: {worst:.2f} ({'within' if worst <= 1 else 'over'} target)")


if __name__ == "__main__":
    main()

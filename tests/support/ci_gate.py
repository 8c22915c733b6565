"""The CI gate as a CI job runs it (``python -m tau2_env.faces.ci_gate`` with only the key
in its environment), and pinning a baseline through the API with a studio key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["gate", "pin"]


def gate(
    settings: Path,
    *,
    key: str,
    run_id: str = "",
    extra: tuple[str, ...] = (),
    timeout: float = 240,
) -> subprocess.CompletedProcess:
    """``python -m tau2_env.faces.ci_gate`` as a CI job runs it: the key in the
    environment, nothing of the test's own settings."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("GITHUB_", "DJANGO", "DATABASE", "TAU2_"))
    }
    env["TAU2_STUDIO_KEY"] = key
    args = [sys.executable, "-m", "tau2_env.faces.ci_gate", str(settings), "--poll-max", "0.5"]
    if run_id:
        args += ["--run-id", run_id]
    args += extra
    return subprocess.run(
        args, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def pin(asgi_server, pk: int, *, key: str) -> dict:
    request = urllib.request.Request(
        f"{asgi_server.url}/api/evaluations/{pk}/baseline/",
        method="POST",
        headers={"Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())

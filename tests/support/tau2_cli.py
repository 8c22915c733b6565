"""τ²'s own ``tau2 run`` CLI in a subprocess: what the faithfulness tests compare with.

One helper for every test that runs the CLI (evaluations, connections, ablation modes), so
the environment it runs in — no developer key, no base-URL variable, litellm's local price
map, no .env — is set in one place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tau2_env.generations import tau2_generation

_GENERATION = tau2_generation()

# Variables that would make the CLI reach something other than the scripted servers.
_DROPPED = (
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "OPENAI_BASE_URL",
    "OPENAI_API_BASE",
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_API_BASE",
    "DJANGO_SETTINGS_MODULE",
)


def tau2_cli_run(
    directory: Path,
    *,
    domain: str,
    task_ids: tuple[str, ...] | list[str],
    agent_llm: str,
    user_llm: str,
    agent_args: dict[str, Any],
    user_args: dict[str, Any],
    num_trials: int = 1,
    seed: int = 300,
    max_steps: int = 20,
    key_variable: str = "OPENAI_API_KEY",
    key: str = "sk-scripted-not-a-key",
    agent_key_variable: str | None = None,
    user_key_variable: str | None = None,
    agent: str | None = None,
    user: str | None = None,
    retrieval_config: str | None = None,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
) -> Path:
    """Run ``tau2 run`` in ``directory`` and return the results file it wrote.

    ``key`` is put in the environment as ``key_variable``. On τ² 0.2, ``--agent-api-key``
    and ``--user-api-key`` name ``agent_key_variable`` / ``user_key_variable`` when given
    (1.x has neither flag: litellm reads the provider's variable);
    without them each side keeps τ²'s own default (the agent's is recorded as
    ``"api_key": "dummy_key"``, the customer's litellm reads from the environment).
    ``agent``/``user`` pick τ²'s agent and user implementations (``--agent
    llm_agent_solo --user dummy_user`` for the ablations). ``retrieval_config`` is
    passed as ``--retrieval-config`` (banking_knowledge, τ² 1.x), ``timeout`` as
    ``--timeout`` (τ² 1.x). ``env``: more variables for the CLI (τ²'s OpenAI embedder
    reads its base URL from ``OPENAI_BASE_URL``, which is dropped otherwise).
    """
    given = env or {}
    env = {name: value for name, value in os.environ.items() if name not in _DROPPED}
    env.update({key_variable: key, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **given})
    command = [str(Path(sys.executable).with_name("tau2")), "run", "--domain", domain]
    if agent:
        command += ["--agent", agent]
    if user:
        command += ["--user", user]
    if retrieval_config:
        command += ["--retrieval-config", retrieval_config]
    if timeout is not None:
        command += ["--timeout", str(timeout)]
    command += [
        "--task-ids",
        *task_ids,
        "--num-trials",
        str(num_trials),
        "--seed",
        str(seed),
        "--max-steps",
        str(max_steps),
        "--max-concurrency",
        "1",
        "--agent-llm",
        agent_llm,
    ]
    if agent_key_variable and _GENERATION == "0.2":
        command += ["--agent-api-key", agent_key_variable]
    command += [
        "--agent-llm-args",
        json.dumps(agent_args),
        "--user-llm",
        user_llm,
    ]
    if user_key_variable and _GENERATION == "0.2":
        command += ["--user-api-key", user_key_variable]
    command += [
        "--user-llm-args",
        json.dumps(user_args),
        "--log-level",
        "WARNING",
    ]
    if _GENERATION == "0.2":
        command += ["--results-dir", str(directory), "--save-to", "results"]
        results = directory / "results.json"
    else:
        # 1.x writes <TAU2_DATA_DIR>/simulations/<save_to>/results.json; an absolute
        # save_to is where it writes.
        command += ["--save-to", str(directory / "results")]
        results = directory / "results" / "results.json"
    # cwd: τ² loads a .env from where it runs; the directory has none.
    done = subprocess.run(
        command, env=env, cwd=directory, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return results


def tau2_cli_review(
    results: Path,
    *,
    mode: str,
    review_model: str,
    api_base: str,
    key: str = "sk-scripted-not-a-key",
) -> dict[str, Any]:
    """Run τ² 1.x's ``tau2 review <results> --mode <mode>`` with its reviewer on
    ``review_model`` at ``api_base`` (``tau2 review`` takes no LLM arguments: litellm reads
    the OpenAI base URL and key from the environment) and return the reviewed results."""
    env = _openai_env(api_base=api_base, key=key)
    output = results.with_name(f"reviewed-{mode}.json")
    command = [
        str(Path(sys.executable).with_name("tau2")),
        "review",
        str(results),
        "--mode",
        mode,
        "--review-model",
        review_model,
        "--max-concurrency",
        "1",
        "--output",
        str(output),
    ]
    _run_cli(command, env=env, cwd=results.parent)
    return json.loads(output.read_text())


def tau2_cli_evaluate_trajs(
    results: Path, *, api_base: str, key: str = "sk-scripted-not-a-key"
) -> dict[str, Any]:
    """Run τ² 1.x's ``tau2 evaluate-trajs <results> --fresh-tasks -o <dir>`` (a re-grade
    against the installed task set) with its NL-assertion judge — τ²'s fixed model, no
    flag chooses it: litellm reads the OpenAI base URL and key from the environment — at
    ``api_base``, and return the re-scored results."""
    env = _openai_env(api_base=api_base, key=key)
    output = results.parent / "evaluated"
    command = [
        str(Path(sys.executable).with_name("tau2")),
        "evaluate-trajs",
        str(results),
        "--fresh-tasks",
        "--output-dir",
        str(output),
    ]
    _run_cli(command, env=env, cwd=results.parent)
    return json.loads((output / f"updated_{results.name}").read_text())


def _openai_env(*, api_base: str, key: str) -> dict[str, str]:
    """The CLI's environment when its LLM (one τ² names itself, no flag giving its
    endpoint) is OpenAI's at ``api_base`` with ``key``: litellm reads both from it."""
    env = {name: value for name, value in os.environ.items() if name not in _DROPPED}
    env.update(
        {"OPENAI_API_KEY": key, "OPENAI_API_BASE": api_base, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    )
    return env


def _run_cli(command: list[str], *, env: dict[str, str], cwd: Path) -> None:
    """Run τ²'s CLI ``command``; it must succeed (its output's tail says why not)."""
    done = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

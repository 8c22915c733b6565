"""A taubench.com leaderboard submission as the installed τ²'s ``tau2 submit`` makes one,
and its own ``tau2 submit validate`` and ``tau2 submit verify-trajs`` run on it.

A submission is a folder: ``submission.json`` (τ²'s ``Submission`` model, written as
``tau2 submit prepare`` writes it) beside ``trajectories/`` (one τ² results file per
domain). What 26.3's code does, and this module follows:

* ``prepare`` writes pass^k as percentages (``pass_hat_k * 100``, the schema's 0–100) and
  ``cost`` as τ²'s ``avg_agent_cost``; ``validate`` recomputes pass^k as fractions (0–1)
  and compares, but prints those comparisons only when the model name differs from the
  trajectories' agent model (it counts only that one as a warning);
* ``validate`` reads ``methodology.user_simulator`` unconditionally (and fails with an
  ``AttributeError`` when it differs from the trajectories' user model), so methodology
  is always written, with the trajectories' own user model;
* ``verify-trajs`` checks each file against the installed τ²'s ``base`` split, task by
  task, and that every task ran ``info.num_trials`` times.

Framework-free. The checks run τ²'s CLI in a child process, in a temporary folder, with an
environment of its own: no key, no token, no endpoint, litellm's local price list, the
Hub offline and no ``.env`` read, so nothing can reach a network.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

# isort: off
from tau2_env.llm._tau2 import registry  # noqa: F401  (τ² through its quiet import, first)
from pydantic import ValidationError
from tau2.data_model.simulation import Results
from tau2.metrics.agent_metrics import compute_metrics
from tau2.scripts.leaderboard.prepare_submission import validate_submission_traj_set
from tau2.scripts.leaderboard.submission import (
    SUBMISSION_FILE_NAME,
    TRAJECTORY_FILES_DIR_NAME,
    ContactInfo,
    DomainResults,
    Methodology,
    Submission,
)
from tau2.scripts.leaderboard.submission import Results as SubmissionResults

# isort: on
from tau2_env.llm import tau2_gen

__all__ = [
    "CHECK_TIMEOUT_SECONDS",
    "DOMAINS",
    "KS",
    "MAX_ERRORS",
    "MAX_STEPS",
    "PUBLISHED_TRIALS",
    "SPLIT",
    "ABLATIONS",
    "SUBMISSION_FILE_NAME",
    "TRAJECTORY_FILES_DIR_NAME",
    "Check",
    "Details",
    "DomainScores",
    "SubmissionInvalid",
    "ablation",
    "checks_run",
    "domain_scores",
    "folder_write",
    "folder_zip",
    "submission_json",
    "trajectories_read",
    "trajectory_set_problem",
]

# The domains taubench.com ranks: the fields of the schema's results.
DOMAINS: tuple[str, ...] = tuple(SubmissionResults.model_fields)
# The split verify-trajs checks every file against (verify_trajectories_public.check_tasks).
SPLIT = "base"
# The pass^k the schema holds (pass_1 … pass_4): taubench.com publishes these four.
KS: tuple[int, ...] = tuple(
    int(name.removeprefix("pass_"))
    for name in DomainResults.model_fields
    if name.startswith("pass_")
)
# τ²'s instructions run every domain with --num-trials 4, for those four.
PUBLISHED_TRIALS = max(KS)


def _run_default(field: str) -> Any:
    return tau2_gen.run_config_default(field)


# `tau2 run`'s own limits (τ²'s RunConfig), what the leaderboard's runs use.
MAX_STEPS: int = _run_default("max_steps")
MAX_ERRORS: int = _run_default("max_errors")
CHECK_TIMEOUT_SECONDS = 300
# Rich prints to a pipe at 80 columns; wide enough that a file name stays on one line.
_COLUMNS = "160"
_MAX_OUTPUT_CHARS = 60_000


class SubmissionInvalid(ValueError):
    """τ²'s ``Submission`` model refused the details; ``problems`` name the fields."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def trajectories_read(text: str) -> Results:
    """τ²'s ``Results`` of a results file's text, read exactly as ``Results.load`` reads it."""
    return Results.model_validate_json(text)


@dataclass(frozen=True)
class DomainScores:
    """What ``tau2 submit prepare`` computes for one results file.

    ``pass_hat_ks``: k → pass^k in percent (τ²'s ``compute_metrics`` × 100), for the k of
    :data:`KS` up to the trials the file has. ``cost``: τ²'s ``avg_agent_cost``, the agent's
    mean cost per trajectory in USD, ``None`` when no simulation has a cost.
    """

    domain: str
    pass_hat_ks: dict[int, float]
    cost: float | None
    num_trials: int
    simulations: int
    tasks: int
    # banking_knowledge's retrieval configuration, from the results' info (τ² 1.x's
    # prepare_submission copies it into the domain's results; 0.2 has none).
    retrieval_config: str | None = None

    def results(self) -> DomainResults:
        extra = {"retrieval_config": self.retrieval_config} if self.retrieval_config else {}
        return DomainResults(
            **{f"pass_{k}": self.pass_hat_ks.get(k) for k in KS},
            cost=self.cost,
            **extra,
        )


def domain_scores(results: Results) -> DomainScores:
    """τ²'s own metrics of ``results``, as ``tau2 submit prepare`` puts them in the file."""
    metrics = compute_metrics(results)
    cost = metrics.avg_agent_cost
    return DomainScores(
        domain=results.info.environment_info.domain_name,
        pass_hat_ks={k: metrics.pass_hat_ks[k] * 100 for k in KS if k in metrics.pass_hat_ks},
        cost=None if cost is None or math.isnan(cost) else float(cost),
        num_trials=results.info.num_trials,
        simulations=len(results.simulations),
        tasks=len(results.tasks),
        retrieval_config=getattr(results.info, "retrieval_config", None),
    )


# τ²'s ablation agents and user (its README's "Running Ablation Studies"): not a
# leaderboard run of a model.
ABLATIONS = {"llm_agent_solo": "No-User", "llm_agent_gt": "Oracle plan", "dummy_user": "No-User"}


def ablation(results: Results) -> str | None:
    """Why ``results`` is one of τ²'s ablations (No-User, Oracle plan), or None."""
    for side, implementation in (
        ("agent", results.info.agent_info.implementation),
        ("user", results.info.user_info.implementation),
    ):
        if implementation in ABLATIONS:
            return (
                f"its {side} is τ²'s {implementation}, the {ABLATIONS[implementation]} "
                "ablation, not a leaderboard run"
            )
    return None


def trajectory_set_problem(results: Sequence[Results]) -> str | None:
    """What τ²'s own ``validate_submission_traj_set`` finds wrong with these files taken
    together (a domain twice, a different agent or user model or arguments), or None."""
    valid, error = validate_submission_traj_set(list(results))
    return None if valid else error


@dataclass(frozen=True)
class Details:
    """What a person says about a submission (τ²'s prompts in ``tau2 submit prepare``).

    ``user_simulator`` is the trajectories' own user model: τ² 26.3's validate fails on
    any other."""

    model_name: str
    organization: str
    email: str
    user_simulator: str
    submission_date: date
    contact_name: str = ""
    github: str = ""
    is_new: bool = False
    evaluation_date: date | None = None
    tau2_bench_version: str = ""
    notes: str = ""
    # τ² 1.x's schema adds these (0.2's has none of them: left out there).
    submitting_organization: str = ""
    submission_type: str = "standard"
    reasoning_effort: str = ""


def _organizations(details: Details) -> dict[str, str]:
    """The organizations as the installed τ²'s schema names them: 0.2's one
    ``organization`` (the model's), 1.x's ``model_organization`` and
    ``submitting_organization`` (who ran it; the model's when not said)."""
    if "organization" in Submission.model_fields:
        return {"organization": details.organization}
    return {
        "model_organization": details.organization,
        "submitting_organization": details.submitting_organization or details.organization,
    }


def _later_fields(
    details: Details, scores: Mapping[str, DomainScores], trajectory_files: Mapping[str, str]
) -> dict[str, Any]:
    """What τ² 1.x's schema adds, as ``tau2 submit prepare`` 1.x fills it for a text run
    whose trajectories are in the folder; nothing on 0.2, whose schema refuses them."""
    fields = Submission.model_fields
    extra: dict[str, Any] = {}
    if "submission_type" in fields:
        extra["submission_type"] = details.submission_type or "standard"
    if "modality" in fields:
        extra["modality"] = "text"
    if "reasoning_effort" in fields and details.reasoning_effort:
        extra["reasoning_effort"] = details.reasoning_effort
    if "trajectory_files" in fields and trajectory_files:
        extra["trajectories_available"] = True
        extra["trajectory_files"] = {
            domain: _file_name(name)
            for domain, name in trajectory_files.items()
            if domain in scores
        }
    return extra


def submission_json(
    *,
    details: Details,
    scores: Mapping[str, DomainScores],
    trajectory_files: Mapping[str, str] | None = None,
) -> str:
    """``submission.json`` as ``tau2 submit prepare`` writes it (τ²'s ``Submission``,
    ``indent=2``, no nulls), with methodology always present (see the module's notes).
    ``trajectory_files``: each domain's file in the folder's trajectories (named in
    τ² 1.x's ``trajectory_files``). Raises :class:`SubmissionInvalid` when τ²'s model
    refuses a value."""
    trajectory_files = trajectory_files or {}
    try:
        submission = Submission(
            model_name=details.model_name,
            **_organizations(details),
            **_later_fields(details, scores, trajectory_files),
            submission_date=details.submission_date,
            contact_info=ContactInfo(
                email=details.email,
                name=details.contact_name or None,
                github=details.github or None,
            ),
            results=SubmissionResults(**{d: s.results() for d, s in scores.items()}),
            is_new=details.is_new,
            methodology=Methodology(
                evaluation_date=details.evaluation_date,
                tau2_bench_version=details.tau2_bench_version or None,
                user_simulator=details.user_simulator,
                notes=details.notes or None,
            ),
        )
    except ValidationError as exc:
        raise SubmissionInvalid(
            [
                f"{'.'.join(str(part) for part in error['loc']) or 'submission'}: {error['msg']}"
                for error in exc.errors()
            ]
        ) from None
    return submission.model_dump_json(indent=2, exclude_none=True)


def folder_write(directory: Path, *, submission: str, trajectories: Mapping[str, str]) -> Path:
    """Write the folder (``submission.json``, ``trajectories/<name>``) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / SUBMISSION_FILE_NAME).write_text(submission, encoding="utf-8")
    folder = directory / TRAJECTORY_FILES_DIR_NAME
    folder.mkdir(exist_ok=True)
    for name, text in trajectories.items():
        (folder / _file_name(name)).write_text(text, encoding="utf-8")
    return directory


def folder_zip(*, root: str, submission: str, trajectories: Mapping[str, str]) -> bytes:
    """The folder as a .zip whose entries sit under ``root/``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{root}/{SUBMISSION_FILE_NAME}", submission)
        for name, text in trajectories.items():
            archive.writestr(f"{root}/{TRAJECTORY_FILES_DIR_NAME}/{_file_name(name)}", text)
    return buffer.getvalue()


def _file_name(name: str) -> str:
    if not name.endswith(".json") or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"A trajectory file is named <something>.json, not {name!r}")
    return name


@dataclass(frozen=True)
class Check:
    """One of τ²'s commands run on a folder: ``output`` is what it printed (stdout and
    stderr, as it printed them); ``verdict`` is "passed", "warnings" (validate passed and
    printed warnings), "failed" or "timed out"."""

    name: str
    command: str
    verdict: str
    returncode: int | None
    output: str

    @property
    def passed(self) -> bool:
        return self.verdict in ("passed", "warnings")


def _tau2_command() -> list[str]:
    """The installed ``tau2`` console script beside this Python, else its module."""
    script = Path(sys.executable).with_name("tau2")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "tau2.cli"]


def _environment(home: str) -> dict[str, str]:
    """A child's environment built from nothing: no key, token or endpoint can be in it."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        # litellm's bundled price list (no download at import), the Hub offline, and no
        # .env found by τ²'s load_dotenv() above the installed package.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
        "PYTHON_DOTENV_DISABLED": "1",
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": _COLUMNS,
    }


def _verdict(name: str, returncode: int, output: str) -> str:
    if returncode != 0:
        return "failed"
    if name == "verify-trajs":
        return "passed" if "All files passed all checks" in output else "failed"
    # validate prints its refusals and returns 0; a failed verify inside it exits 1.
    if "validation failed" in output or "Submission validation successful" not in output:
        return "failed"
    return "warnings" if tau2_gen.VALIDATE_WARNINGS in output else "passed"


def _run(name: str, arguments: list[str], *, cwd: str, timeout: float) -> Check:
    command = [*_tau2_command(), "submit", name, *arguments]
    shown = " ".join(["tau2", "submit", name, *arguments])
    try:
        done = subprocess.run(  # noqa: S603 - our own τ²'s CLI, fixed arguments
            command,
            cwd=cwd,
            env=_environment(cwd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (exc.output or b"").decode("utf-8", "replace")
        return Check(
            name=name,
            command=shown,
            verdict="timed out",
            returncode=None,
            output=output[-_MAX_OUTPUT_CHARS:] + f"\n[stopped after {timeout:g} s]",
        )
    output = done.stdout.decode("utf-8", "replace")
    if len(output) > _MAX_OUTPUT_CHARS:
        output = "[…]\n" + output[-_MAX_OUTPUT_CHARS:]
    return Check(
        name=name,
        command=shown,
        verdict=_verdict(name, done.returncode, output),
        returncode=done.returncode,
        output=output,
    )


def checks_run(
    *,
    submission: str,
    trajectories: Mapping[str, str],
    timeout: float = CHECK_TIMEOUT_SECONDS,
) -> list[Check]:
    """Write the folder into a temporary directory and run the installed τ²'s
    ``tau2 submit validate submission`` and ``tau2 submit verify-trajs
    submission/trajectories`` on it (relative paths, so their output names no server
    path); each stops after ``timeout`` seconds. The directory is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="tau2-submission-") as tmp:
        folder_write(Path(tmp) / "submission", submission=submission, trajectories=trajectories)
        return [
            _run("validate", ["submission"], cwd=tmp, timeout=timeout),
            _run(
                "verify-trajs",
                [f"submission/{TRAJECTORY_FILES_DIR_NAME}"],
                cwd=tmp,
                timeout=timeout,
            ),
        ]

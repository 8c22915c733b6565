"""Writes of datasets: asking for a push to the Hugging Face Hub, and doing it.

A push sends the selection's SFT rows and, when it has any, its preference pairs, in the
chosen format, to a dataset repository of the person's own on the Hub
(``TAU2_HF_HUB_URL``, the Hub sign-in and the token check use), with their own token
from the vault. The worker's task carries the push's id only; the token is read there
and goes to the Hub in the Authorization header only (``huggingface_hub``'s own).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import httpx
from celery import current_app
from django.db import transaction
from django.http import QueryDict
from django.utils import timezone
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

from apps.accounts.vault import SignInRequired, hf_token_for
from apps.datasets import exports
from apps.datasets.models import DatasetPush
from apps.datasets.selectors import (
    PARQUET,
    PREFERENCE,
    SFT,
    Selection,
    SelectionError,
    selection_counts,
)
from tau2_env.gate.hf_identity import hub_url

PUSH_TASK = "datasets.push"

# The Hub's rule for a repository name (and a namespace): letters, digits, - _ . ; not
# starting or ending with - or ., no "--" or "..", at most 96 characters.
_NAME = re.compile(r"^(?![-.])(?!.*(--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])$")

DONE = "done"
CLAIMED_ELSEWHERE = "claimed"


class PushRefused(ValueError):
    """A push that cannot be asked for; ``str()`` says why, in words."""


def repo_id_clean(value: str) -> str:
    """``name`` or ``namespace/name`` as the Hub accepts it; raises :class:`PushRefused`."""
    repo_id = (value or "").strip()
    parts = repo_id.split("/")
    if not repo_id or len(parts) > 2 or not all(_NAME.match(part) for part in parts):
        raise PushRefused(
            "Name the dataset repository as the Hub does: name or namespace/name, with "
            "letters, digits, '-', '_' and '.' (up to 96 characters each)."
        )
    return repo_id


def dataset_push_request(
    *, user, selection: Selection, repo_id: str, private: bool, queue: str | None = None
) -> DatasetPush:
    """Ask for the selection's datasets to be pushed to ``repo_id`` on the Hub, by
    ``user`` with their own token; queued for a worker once it commits (on ``queue``,
    default the workers' own). Raises :class:`PushRefused` for a bad name, a person
    without a Hugging Face sign-in, or a selection that cannot be downloaded."""
    repo_id = repo_id_clean(repo_id)
    try:
        hf_token_for(user=user)  # a sign-in that works now, before anything is queued
    except SignInRequired as exc:
        raise PushRefused(str(exc)) from None
    counts = selection_counts(selection)
    if counts.refusal:
        raise PushRefused(counts.refusal)
    push = DatasetPush.objects.create(
        created_by=user, query=selection.as_query(), repo_id=repo_id, private=private
    )
    options = {"queue": queue} if queue else {}
    transaction.on_commit(lambda: _send(push.pk, options))
    return push


def _send(push_id: int, options: dict) -> None:
    # By name, ids only (as apps.runs.queue sends work): never the token.
    current_app.send_task(PUSH_TASK, args=[push_id], **options)


def dataset_push_execute(*, push_id: int) -> str:
    """Push ``push_id`` (once: the claim is one UPDATE; a second worker lets go), and
    mark it DONE with the repository's URL or FAILED with why."""
    claimed = DatasetPush.objects.filter(pk=push_id, status=DatasetPush.Status.QUEUED).update(
        status=DatasetPush.Status.RUNNING
    )
    if not claimed:
        return CLAIMED_ELSEWHERE
    push = DatasetPush.objects.select_related("created_by").get(pk=push_id)
    token = ""
    try:
        token = hf_token_for(user=push.created_by)
        url, commit_url, rows, pairs = _push(push, token=token)
    except SignInRequired as exc:
        return _fail(push, str(exc))
    except SelectionError as exc:
        return _fail(push, str(exc))
    except HfHubHTTPError as exc:
        return _fail(push, _hub_refusal(exc, token=token))
    except OfflineModeIsEnabled:
        return _fail(push, "This server works offline (HF_HUB_OFFLINE): it cannot push.")
    except (httpx.HTTPError, OSError):
        return _fail(push, f"The Hub at {hub_url()} could not be reached. Try again later.")
    DatasetPush.objects.filter(pk=push.pk).update(
        status=DatasetPush.Status.DONE,
        url=url,
        commit_url=commit_url,
        rows=rows,
        pairs=pairs,
        finished_at=timezone.now(),
    )
    return DONE


def _push(push: DatasetPush, *, token: str) -> tuple[str, str, int, int]:
    selection = Selection.from_params(_params(push.query))
    counts = selection_counts(selection)
    if counts.refusal:
        raise SelectionError(counts.refusal)
    extension = "parquet" if selection.format == PARQUET else "jsonl"
    api = HfApi(endpoint=hub_url(), token=token)
    with tempfile.TemporaryDirectory(prefix="tau2-dataset-") as folder:
        root = Path(folder)
        written = {}
        for kind in (SFT, PREFERENCE):
            part = Selection(**{**vars(selection), "kind": kind})
            if kind == PREFERENCE and not counts.pairs:
                continue
            path = root / kind / f"train.{extension}"
            path.parent.mkdir()
            written[kind] = _write(part, path)
        (root / "README.md").write_text(
            dataset_card(selection=selection, files=written, extension=extension)
        )
        repo = api.create_repo(
            push.repo_id, repo_type="dataset", private=push.private, exist_ok=True
        )
        commit = api.upload_folder(
            repo_id=repo.repo_id,
            repo_type="dataset",
            folder_path=root,
            commit_message=f"τ²-bench studio: {written.get(SFT, 0)} conversations",
        )
    return str(repo), commit.commit_url, written.get(SFT, 0), written.get(PREFERENCE, 0)


def _write(selection: Selection, path: Path) -> int:
    rows = 0
    with path.open("wb") as out:
        if selection.format == PARQUET:
            return exports.write_parquet(
                exports.rows_of(selection), schema=exports.schema_of(selection), out=out
            )
        for chunk in exports.jsonl_lines(exports.rows_of(selection), batch=1):
            out.write(chunk)
            rows += 1
    return rows


def dataset_card(*, selection: Selection, files: dict[str, int], extension: str) -> str:
    """The repository's README: ``datasets``' configs (one per kind) and what is in it."""
    configs = []
    for kind in files:
        configs.append(
            f"- config_name: {kind}\n  data_files:\n  - split: train\n"
            f"    path: {kind}/train.{extension}" + ("\n  default: true" if kind == SFT else "")
        )
    lines = [
        "---",
        "configs:",
        *configs,
        "tags:",
        "- tau2-bench",
        "- tool-calling",
        "---",
        "",
        "# τ²-bench conversations",
        "",
        "Exported by τ²-bench studio from its runs "
        f"(selection: `{selection.runs_query() or 'all runs'}`).",
        "",
        f"- `sft`: {files.get(SFT, 0)} conversations, one per run: `messages` (τ²'s agent "
        "system message, then what the agent saw and did, OpenAI chat format with tool calls) "
        "and `tools` (the domain's tool schemas, a JSON string), with run_id, domain, "
        "task_id, reward, model, kind.",
    ]
    if PREFERENCE in files:
        lines.append(
            f"- `preference`: {files[PREFERENCE]} pairs (prompt / chosen / rejected) of the "
            "same task, a passing conversation (reward 1) against a failing one (reward 0)."
        )
    return "\n".join(lines) + "\n"


def _hub_refusal(exc: HfHubHTTPError, *, token: str) -> str:
    status = exc.response.status_code if exc.response is not None else None
    if status in (401, 403):
        return (
            f"The Hub refused your token (HTTP {status}): your Hugging Face sign-in does not "
            "let this app create or write dataset repositories, or the repository belongs "
            "to someone else. Sign in with Hugging Face again, allowing it to write "
            "repositories (the server asks for that with TAU2_HF_SIGNIN_WRITE_REPOS=true), "
            "or pick a repository of your own."
        )
    said = str(exc).splitlines()[0] if str(exc) else ""
    if token:
        said = said.replace(token, "…")
    return f"The Hub answered HTTP {status}: {said[:300]}"


def _fail(push: DatasetPush, reason: str) -> str:
    DatasetPush.objects.filter(pk=push.pk).update(
        status=DatasetPush.Status.FAILED, error=reason, finished_at=timezone.now()
    )
    return DatasetPush.Status.FAILED


def _params(query: str) -> dict[str, str]:
    return QueryDict(query).dict()

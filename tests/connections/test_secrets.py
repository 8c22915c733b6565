"""A connection's key and header values appear nowhere in plain text.

The issue's target: "a key in plain text anywhere (DB dump, logs at DEBUG, Redis, pages,
exports) = 0". A team connection gets a distinctive key and a secret header value (shaped
like no token, so the redaction of token-shaped text cannot be what hides a leak), and a
model run on it goes to its end; then neither appears in:

* a ``pg_dump`` of the test database (while the connection's row and its sealed key are
  in it);
* Redis: every key and value of the test's database afterwards, and every command any
  client sent to the server during the run (``MONITOR``), Celery's messages decoded —
  the run's task carried its id and nothing else;
* the log records of the whole run at DEBUG, litellm's and the HTTP clients' included,
  and what was written to stdout and stderr (the worker's code run in this process);
* the run's page, the run list, both exports, the connections' pages and the admin's
  change pages of the connection and of the run.

Meanwhile the scripted endpoint did get both: they went where they should, only there.
"""

from __future__ import annotations

import base64
import codecs
import json
import logging
import os
import re
import shutil
import subprocess
import threading
from glob import glob

import pytest
import redis
from django.conf import settings
from django.contrib import admin
from django.db import connection as db_connection
from django.urls import NoReverseMatch, reverse

from apps.connections.models import Connection
from apps.connections.services import ConnectionFields, connection_create
from apps.runs.models import Run
from apps.runs.runner import run_execute
from apps.runs.services import model_run_build, run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tau2_env.engine.evaluation import trial_seeds
from tests.support.scripts import GOLD_TASK, finished, gold_script, wait_for

pytestmark = pytest.mark.slow

# Shaped like no token (no sk-, no hf_), so redact()'s patterns cannot hide a leak.
KEY = "lab-KEY-9f3c2e71d8a4b605e2c7"
HEADER_NAME, HEADER_VALUE = "X-Tenant-Token", "tenant-SECRET-4b1d9a7e3c5f"
# The parts that are the secret: a leak that masks the ends still shows them (the key's
# last four characters are its hint, on purpose).
SECRET_PARTS = (KEY, HEADER_VALUE, "9f3c2e71d8a4b605", "4b1d9a7e3c5f")
MODEL = "lab-agent-7b"
LOGGERS = (
    "",
    "LiteLLM",
    "LiteLLM Router",
    "LiteLLM Proxy",
    "openai",
    "httpx",
    "httpcore",
    "celery",
    "kombu",
    "django",
    "apps",
    "tau2_env",
)


def leaks(text: str | bytes) -> list[str]:
    """The secret parts found in ``text``."""
    data = text.decode(errors="replace") if isinstance(text, bytes) else text
    return [part for part in SECRET_PARTS if part in data]


def lab_connection(*, by, llm) -> Connection:
    """A team connection to the scripted server with the secret key and header."""
    return connection_create(
        by=by,
        kind="openai_compatible",
        fields=ConnectionFields(
            name="Lab vLLM",
            base_url=llm.base_url,
            api_key=KEY,
            headers={HEADER_NAME: HEADER_VALUE},
            models=[MODEL],
        ),
    )


def assert_sent_only_to_the_endpoint(llm_server) -> None:
    requests = llm_server.chat_requests()
    assert requests, "the run made no model call"
    for request in requests:
        assert request.token == KEY
        assert {k.lower(): v for k, v in request.headers.items()}[HEADER_NAME.lower()] == (
            HEADER_VALUE
        )


# ------------------------------------------------------------------- Redis


class RedisMonitor:
    """Every command sent to the Redis server while it runs (``MONITOR``: every client,
    every database), each as its database number and its arguments, unescaped."""

    _LINE = re.compile(rb"^[0-9.]+ \[(\d+) [^\]]*\] (.*)$", re.DOTALL)
    _ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')

    def __init__(self, url: str) -> None:
        self._client = redis.Redis.from_url(url)
        self._connection = self._client.connection_pool.get_connection()
        self._connection.send_command("MONITOR")
        assert self._connection.read_response() in (b"OK", "OK")
        self.commands: list[tuple[int, list[bytes]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            if not self._connection.can_read(timeout=0.1):
                continue
            line = self._connection.read_response(disable_decoding=True)
            matched = self._LINE.match(line)
            assert matched, line[:200]
            args = [codecs.escape_decode(arg)[0] for arg in self._ARG.findall(matched[2])]
            self.commands.append((int(matched[1]), args))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._connection.disconnect()

    def celery_messages(self, *, db: int, queue: str) -> list[dict]:
        """The Celery messages pushed to ``queue`` in database ``db``, bodies decoded."""
        found = []
        for number, args in self.commands:
            if number != db or len(args) < 3 or args[0].upper() != b"LPUSH":
                continue
            if args[1] != queue.encode():
                continue
            for value in args[2:]:
                message = json.loads(value)
                body = base64.b64decode(message["body"])
                found.append({**message, "decoded_body": json.loads(body)})
        return found

    def everything(self) -> bytes:
        """Every argument of every command, with base64 bodies of Celery messages (any
        database, any queue) decoded too."""
        parts = [arg for _, args in self.commands for arg in args]
        for _, args in self.commands:
            for arg in args:
                if arg.startswith(b"{") and b'"body"' in arg:
                    try:
                        parts.append(base64.b64decode(json.loads(arg)["body"]))
                    except (ValueError, KeyError, TypeError):
                        continue
        return b"\n".join(parts)


def redis_contents(url: str) -> tuple[list[bytes], bytes]:
    """The keys of the Redis database at ``url`` and all their values (by type, and as
    DUMPed), as one blob."""
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(count=500))
    blob: list[bytes] = []
    for key in keys:
        kind = client.type(key)
        if kind == b"string":
            values = [client.get(key)]
        elif kind == b"list":
            values = client.lrange(key, 0, -1)
        elif kind == b"hash":
            values = [item for pair in client.hgetall(key).items() for item in pair]
        elif kind == b"set":
            values = list(client.smembers(key))
        elif kind == b"zset":
            values = [member for member, _ in client.zrange(key, 0, -1, withscores=True)]
        elif kind == b"stream":
            values = [json.dumps(entry, default=repr).encode() for entry in client.xrange(key)]
        else:
            values = []
        blob += [key, *(v for v in values if v is not None), client.dump(key) or b""]
    return keys, b"\n".join(blob)


# -------------------------------------------------------------- PostgreSQL


def _pg_dump() -> str | None:
    return shutil.which("pg_dump") or next(
        iter(sorted(glob("/usr/lib/postgresql/*/bin/pg_dump"), reverse=True)), None
    )


def database_dump() -> str:
    binary = _pg_dump()
    if binary is None:
        pytest.skip("pg_dump is not installed here (not on PATH nor /usr/lib/postgresql)")
    db = db_connection.settings_dict
    command = [binary, "--no-owner", "--dbname", db["NAME"]]
    for flag, name in (("--host", "HOST"), ("--port", "PORT"), ("--username", "USER")):
        if db.get(name):
            command += [flag, str(db[name])]
    env = {"PGPASSWORD": str(db["PASSWORD"])} if db.get("PASSWORD") else {}
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


# ------------------------------------------------------------------- pages


def pages_of(*, run: Run, connection: Connection, alice_client, staff_client) -> dict:
    """What alice and staff may open about the run and the connection: path → body."""
    seen = {}
    for client, path in (
        (alice_client, f"/runs/{run.pk}/"),
        (alice_client, "/runs/"),
        (alice_client, f"/runs/{run.pk}.json"),
        (alice_client, f"/runs/{run.pk}.json?format=tau2"),
        (staff_client, f"/admin/runs/run/{run.pk}/change/"),
    ):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        seen[path] = response.content.decode()
    # The connections' own pages and admin, where this checkout has them.
    for name, args in (
        ("connections:list", ()),
        ("connections:detail", (connection.pk,)),
        ("connections:edit", (connection.pk,)),
    ):
        try:
            path = reverse(name, args=args)
        except NoReverseMatch:
            continue
        response = staff_client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        seen[path] = response.content.decode()
    if admin.site.is_registered(Connection):
        for path in (
            "/admin/connections/connection/",
            f"/admin/connections/connection/{connection.pk}/change/",
        ):
            response = staff_client.get(path)
            assert response.status_code == 200, (path, response.status_code)
            seen[path] = response.content.decode()
    return seen


# ------------------------------------------------------------------- tests


def test_a_run_on_a_connection_leaves_its_key_in_no_dump_redis_page_export_or_task(
    celery_worker,
    llm_server,
    staff,
    staff_client,
    alice,
    alice_client,
    caplog,
):
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    gold_script(llm_server)
    lab = lab_connection(by=staff, llm=llm_server)
    monitor = RedisMonitor(settings.REDIS_URL)
    try:
        run = run_create(
            user=alice,
            task=Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1]),
            spec=RunSpec(agent=Side(MODEL, lab), customer=Side(MODEL, lab), max_steps=20),
        )
        run = wait_for(run, finished, timeout=120)
    finally:
        monitor.stop()

    assert run.status == Run.Status.COMPLETED and run.reward == 1.0, run.error
    assert_sent_only_to_the_endpoint(llm_server)

    # The database: the row and its sealed key are there, the key is not.
    dump = database_dump()
    stored = Connection.objects.get(pk=lab.pk)
    assert stored.api_key_enc and stored.api_key_enc in dump and "Lab vLLM" in dump
    assert HEADER_NAME in dump  # the header's name is shown to staff, its value never
    assert leaks(dump) == []

    # Redis: the run's task went through it with the run's id only.
    db = redis.Redis.from_url(settings.REDIS_URL).connection_pool.connection_kwargs.get("db", 0)
    messages = monitor.celery_messages(db=db, queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    tasks = [m for m in messages if m["headers"]["task"] == "runs.execute"]
    assert [m["decoded_body"][:2] for m in tasks] == [[[run.pk], {}]]
    assert tasks[0]["headers"]["argsrepr"] == f"[{run.pk}]"
    assert leaks(monitor.everything()) == []
    keys, contents = redis_contents(settings.REDIS_URL)
    assert keys, "nothing in the test's Redis database: not the one the site uses?"
    assert leaks(contents) == []

    # Pages and exports, as alice and staff see them.
    pages = pages_of(run=run, connection=lab, alice_client=alice_client, staff_client=staff_client)
    assert "Lab vLLM" in pages[f"/runs/{run.pk}/"]
    assert "Lab vLLM" in pages[f"/runs/{run.pk}.json"]
    assert {path: leaks(body) for path, body in pages.items() if leaks(body)} == {}

    # This process's side of it (the start, the enqueue, the pages) at DEBUG.
    assert caplog.records
    assert leaks("\n".join(repr(r.__dict__) for r in caplog.records)) == []


def test_the_workers_code_logs_no_secret_at_debug(
    llm_server,
    staff,
    alice,
    caplog,
    capfd,
):
    """The worker's side in this process (``run_execute``, what the Celery task calls),
    every logger at DEBUG: litellm logs each request with its headers at DEBUG."""
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    gold_script(llm_server)
    lab = lab_connection(by=staff, llm=llm_server)
    run = model_run_build(
        user=alice,
        task=Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1]),
        spec=RunSpec(agent=Side(MODEL, lab), customer=Side(MODEL, lab), max_steps=20, seed=300),
        trial=0,
        trial_seed=trial_seeds(300, 1)[0],
        prices=None,
    )
    run.save()  # not queued: this test is its worker

    assert run_execute(run_id=run.pk, worker="secrets-test") == Run.Status.COMPLETED

    assert_sent_only_to_the_endpoint(llm_server)
    litellm_records = [r for r in caplog.records if r.name.startswith("LiteLLM")]
    assert any(r.levelno == logging.DEBUG for r in litellm_records), "litellm logged nothing"
    # The record that used to carry the header in the clear is there, without it.
    curl = [r for r in litellm_records if "POST Request Sent from LiteLLM" in r.getMessage()]
    assert curl and all(HEADER_NAME in r.getMessage() for r in curl)
    assert leaks("\n".join(repr(r.__dict__) + r.getMessage() for r in caplog.records)) == []
    written = capfd.readouterr()
    assert leaks(written.out + written.err) == []

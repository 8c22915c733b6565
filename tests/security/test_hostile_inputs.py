"""Hostile inputs never make a 500: every route of the URLconf, with NUL bytes, huge
numbers, unreachable names, paths, long and odd text in its path and its query; the
probes people found; and tool arguments that are too deep, too large or hold a NUL.

alice owns the work the URLs point at (so her requests reach the deepest code);
charlie is anonymous.
"""

from __future__ import annotations

import base64
import json
import sys
from urllib.parse import quote, urlencode

import pytest
from django.core.signals import got_request_exception
from django.test import Client

from tests.support.jobs import followed
from tests.support.people import signed_in
from tests.support.urlconf import fill, routes

HOSTILE = [
    "\x00",
    "a\x00b",
    "%00",
    "9" * 30,
    "-1",
    "1e309",
    "a.b",
    "../../../etc/passwd",
    "..%2F..%2F",
    "x" * 5000,
    "é漢字😀\u202e",
    "[" * 1000,
    '{"a":' * 500,
    "' OR 1=1 --",
    "<script>alert(1)</script>",
]
# Every query parameter a page or the API reads (and a few it does not).
KEYS = [
    "q", "domain", "split", "kind", "model", "person", "task", "status", "reward", "page",
    "ids", "format", "after", "limit", "offset", "seq", "preview", "category", "critical",
    "label", "next", "reason", "version", "agent_model", "task_id", "run", "evaluation",
]  # fmt: skip


class ServerErrors:
    """Every request that ended in an exception (a 500), with what was raised."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.current = ""

    def __call__(self, sender, request=None, **kwargs):
        exc = sys.exc_info()[1]
        self.seen.append(f"{self.current}: {type(exc).__name__}: {str(exc)[:200]}")


@pytest.fixture
def server_errors():
    errors = ServerErrors()
    got_request_exception.connect(errors)
    yield errors
    got_request_exception.disconnect(errors)


def _values(work) -> dict[str, str]:
    return {
        "pk": str(work["run"].pk),
        "label_pk": "1",
        "delivery_pk": "1",
        "domain": "airline",
        "task_id": "27",
        "backend": "huggingface",
        "association_id": "1",
        "content_type_id": "1",
        "object_id": "1",
        "id": "1",
        "app_label": "runs",
        "url": "x/",
    }


def _get(client: Client, path: str, errors: ServerErrors, problems: list[str]) -> None:
    errors.current = path[:160]
    response = client.get(path)
    # /health/workers answers 503 by design while no worker is alive (none is, here).
    said_no_worker = path.startswith("/health/workers") and response.status_code == 503
    if response.status_code >= 500 and not said_no_worker:
        problems.append(f"GET {path[:160]!r}: {response.status_code}")


@pytest.mark.slow
def test_no_html_route_answers_5xx_to_hostile_paths_and_queries(work, alice, server_errors):
    """Every route: each path parameter replaced by each hostile value, then the normal
    path with every query parameter set to it — as alice, and as an anonymous visitor."""
    problems: list[str] = []
    clients = {"alice": signed_in(alice), "charlie": Client(raise_request_exception=False)}
    clients["alice"].raise_request_exception = False
    normal = _values(work)
    for route in routes():
        admin = route.route.startswith("admin/")
        for who, client in clients.items():
            if admin and who == "charlie":
                continue  # the admin sends him to its login page, whatever he asks
            base = fill(route, normal)
            for value in HOSTILE if not admin else HOSTILE[:4]:
                for param in route.params:
                    path = fill(route, {**normal, param: quote(value, safe="")})
                    _get(client, path, server_errors, problems)
                _get(
                    client,
                    f"{base}?{urlencode(dict.fromkeys(KEYS, value))}",
                    server_errors,
                    problems,
                )
    assert not problems, "\n".join(problems + server_errors.seen)


# --- The probes of issue 11 -----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/tasks/?domain=a.b",
        "/tasks/?q=%00",
        "/runs/?model=%00",
        "/models/?q=%00",
        "/api/tasks/?domain=%00",
        "/tasks/airline/%00/",
        "/runs/%00/",
        "/api/tasks/?limit=99999999999999999999999",
        "/api/tasks/?limit=5&offset=99999999999999999999999",
        "/runs/99999999999999999999999/",
        "/api/evaluations/?limit=99999999999999999999999",
    ],
)
def test_the_probes_that_made_500s_answer_4xx_or_a_page(path, alice):
    client = signed_in(alice)
    client.raise_request_exception = True  # a 500 fails with its traceback
    response = client.get(path)
    assert response.status_code in (200, 400, 404), (path, response.status_code)
    if "%00" in path:
        assert response.status_code == 400
        assert b"NUL" in response.content


def test_an_unknown_domain_that_is_no_slug_says_so(client, catalogue):
    response = client.get("/tasks/", {"domain": "a.b"})
    assert response.status_code == 200 and "No domain “a.b”" in response.content.decode()


def test_a_page_of_the_api_holds_at_most_1000_rows(client, catalogue):
    body = client.get("/api/tasks/", {"domain": "telecom", "split": "full", "limit": 10**30})
    assert body.status_code == 200
    payload = body.json()
    assert payload["count"] == 2285 and len(payload["results"]) == 1000
    assert client.get("/api/tasks/", {"limit": 10**30, "offset": 10**30}).json()["results"] == []


def test_a_nul_in_a_form_field_is_refused_before_any_view(alice):
    client = signed_in(alice)
    for path, data in (
        ("/runs/new/", {"domain": "airline", "task_id": "2\x007"}),
        ("/play/new/", {"domain": "airline", "split": "base", "task_id": "\x00"}),
        ("/evaluations/new/", {"name": "a\x00"}),
    ):
        response = client.post(path, data)
        assert response.status_code == 400 and b"NUL" in response.content, path
    from apps.runs.models import Run

    assert not Run.objects.exists()


# --- Tool arguments on the play page ----------------------------------------------------------


def _nested(depth: int) -> dict:
    value: dict = {"user_id": "x"}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"user_id": "\\u0000"}', "NUL character"),
        ('{"user_id": "a\\u0000b", "x": 1}', "NUL character"),
        ('{"\\u0000": 1}', "NUL character"),
        ("[" * 100_000 + "]" * 100_000, "larger than 64 KB"),
        ('{"a":' * 5000 + "1" + "}" * 5000, "levels deep"),
        (json.dumps(_nested(40)), "levels deep"),
        (json.dumps({"user_id": "x" * 70_000}), "larger than 64 KB"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_tool_arguments_too_deep_too_large_or_with_a_nul_are_refused_and_nothing_is_stored(
    arguments, reason, work, alice
):
    play = work["play"]
    client = signed_in(alice)
    client.raise_request_exception = True
    response = client.post(
        f"/play/{play.pk}/tool/",
        {"name": "get_user_details", "arguments": arguments},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 400
    assert reason in json.dumps(response.json()["errors"])
    assert not play.events.exists()
    play.refresh_from_db()
    assert play.play_phase == "your_turn"  # the player may go on


def test_the_play_schemas_refuse_what_the_form_refuses():
    from apps.play.schemas import argument_errors

    schema = {"type": "object", "properties": {"user_id": {"type": "string"}}}
    assert argument_errors(schema, {"user_id": "a\x00"}) == {
        "__all__": "The arguments hold a NUL character (\\u0000), which can't be stored."
    }
    assert "levels deep" in argument_errors(schema, _nested(40))["__all__"]
    assert argument_errors(schema, {"user_id": "ok"}) == {}


def test_the_api_takes_no_http_basic_credentials(client, catalogue):
    """Nobody has a password: a Basic header (here with a NUL in its username, which the
    fuzzer found made a 500) is no way in."""
    credentials = base64.b64encode(b"ali\x00ce:password").decode()
    response = client.get("/api/evaluations/", HTTP_AUTHORIZATION=f"Basic {credentials}")
    assert response.status_code == 403


# --- The probes of issue 18: a results file and the forms' numbers --------------------------


def _results(**change) -> dict:
    """A good one-simulation results file with ``change`` applied: ``info.<key>`` or
    ``sim.<key>`` (its simulation) set to the value."""
    from tests.support.evaluations import results_file

    data = results_file()
    for where, value in change.items():
        part, key = where.split("__", 1)
        (data["info"] if part == "info" else data["simulations"][0])[key] = value
    return data


def _deep(levels: int) -> bytes:
    data = json.dumps(_results(sim__messages="HOLE")).encode()
    return data.replace(b'"HOLE"', b"[" * levels + b"]" * levels)


def _upload(client: Client, data: bytes):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("results.json", data, content_type="application/json")
    return client.post("/evaluations/import/", {"file": upload})


def _with_usage(usage: dict) -> dict:
    message = {"role": "assistant", "content": "Hello.", "usage": usage, "cost": 0.001}
    return _results(sim__messages=[message])


IMPORT_PROBES = {
    "nested 50,000 deep": (_deep(50_000), "The file is nested deeper than 64 levels."),
    "nested 100,000 deep": (_deep(100_000), "The file is nested deeper than 64 levels."),
    "max_steps 10**30": (
        _results(info__max_steps=10**30),
        "info.max_steps is 1000000000000000000000000000000; it must be 1 to 2147483647.",
    ),
    "max_errors -1": (_results(info__max_errors=0), "info.max_errors is 0; it must be 1 to"),
    "seed 10**40": (
        _results(info__seed=10**40),
        "info.seed is 10000000000000000000000000000000000000000; it must be "
        "-9223372036854775808 to 9223372036854775807.",
    ),
    "simulation seed 2**63": (
        _results(sim__seed=2**63),
        "simulations[0].seed is 9223372036854775808",
    ),
    "an integer of 5,000 digits": (
        json.dumps(_results()).replace('"seed": 300', '"seed": ' + "9" * 5000),
        "The file holds an integer of 5,000 digits; at most 100 are accepted.",
    ),
    "duration 1e308": (
        _results(sim__duration=1e308),
        "simulations[0].duration is 1e+308 s: it would end after 9999-12-30.",
    ),
    "an end past 9999": (
        _results(sim__start_time="9999-12-30T12:00:00", sim__duration=86400.0),
        "simulations[0].duration is 86400.0 s: it would end after 9999-12-30.",
    ),
    "a start past 9999": (
        _results(sim__start_time="9999-12-31T23:00:00"),
        "simulations[0].start_time is &#x27;9999-12-31T23:00:00&#x27;; it must be a date from "
        "0001-01-02 to 9999-12-30.",
    ),
    "a token count that is no number": (
        _with_usage({"prompt_tokens": "many", "completion_tokens": 3}),
        "simulations[0].messages[0].usage.prompt_tokens is &#x27;many&#x27;; it must be a "
        "whole number from 0 to 2147483647.",
    ),
    "a token count beyond the column": (
        _with_usage({"prompt_tokens": 1, "completion_tokens": 2**40}),
        "simulations[0].messages[0].usage.completion_tokens is 1099511627776",
    ),
    "a negative token count": (
        _with_usage({"prompt_tokens": -1, "completion_tokens": 0}),
        "usage.prompt_tokens is -1",
    ),
    "a cost beyond the column": (
        _results(sim__agent_cost=1e12),
        "simulations[0].agent_cost is 1000000000000.0; it must be 0 to 999999.999999 USD.",
    ),
    "a raw NUL": (
        json.dumps(_results()).replace('"openai/agent"', '"openai/\x00agent"'),
        "The file holds a NUL character, which cannot be stored.",
    ),
    "an escaped NUL in a message": (
        _results(sim__messages=[{"role": "assistant", "content": "a\x00b"}]),
        "The file holds a NUL character (\\u0000), which cannot be stored.",
    ),
    "an escaped NUL in a key": (
        _results(info__agent_info={"implementation": "x", "llm": "a", "llm_args": {"\x00": 1}}),
        "The file holds a NUL character (\\u0000)",
    ),
    "an unpaired surrogate": (
        json.dumps(_results()).replace('"openai/agent"', '"openai/\\udc00"'),
        "The file holds an unpaired surrogate escape",
    ),
    "NaN": (json.dumps(_results(sim__agent_cost=float("nan"))), "The file holds NaN"),
}


@pytest.mark.parametrize("probe", list(IMPORT_PROBES))
def test_a_hostile_results_file_fails_its_job_with_its_reason_and_nothing_is_stored(
    alice, held_jobs, probe
):
    from apps.evaluations.models import Evaluation
    from apps.runs.models import Run, RunEvent

    data, reason = IMPORT_PROBES[probe]
    if isinstance(data, dict):
        data = json.dumps(data)
    client = signed_in(alice)
    client.raise_request_exception = True  # a 500 fails with its traceback

    response = _upload(client, data.encode() if isinstance(data, str) else data)

    job, body = followed(client, response, held_jobs)  # read by a worker, not the request
    assert job.status == "failed"
    assert 'data-testid="job-error"' in body and reason in body, body[-2000:]
    assert not (Evaluation.objects.exists() or Run.objects.exists() or RunEvent.objects.exists())


def test_the_largest_numbers_the_columns_hold_import(alice):
    from apps.evaluations.imports import evaluation_import

    data = _with_usage({"prompt_tokens": 2**31 - 1, "completion_tokens": 0})
    data["info"].update(max_steps=2**31 - 1, max_errors=2**31 - 1, seed=-(2**63))
    data["simulations"][0].update(
        seed=2**63 - 1, start_time="9999-12-30T12:00:00", duration=3600.0, agent_cost=999999.99
    )

    evaluation = evaluation_import(user=alice, data=json.dumps(data).encode())

    run = evaluation.runs.get()
    assert (evaluation.max_steps, evaluation.seed, run.seed) == (2**31 - 1, -(2**63), 2**63 - 1)
    assert run.finished_at.year == 9999 and run.prompt_tokens == 2**31 - 1
    assert str(run.cost_usd) == "999999.990000"


@pytest.fixture
def agent_models(committed_db, llm_server):
    from tests.support.scripts import refresh_agent_models

    return refresh_agent_models()


def _start_forms() -> dict[str, dict]:
    """What each start page is posted, valid but for the seed (added by the test)."""
    from tests.support.scripts import AGENT_MODEL

    run = {
        "domain": "airline",
        "task_id": "27",
        "agent_model": AGENT_MODEL,
        "user_model": "org/customer",
        "max_steps": 30,
    }
    return {
        "/evaluations/new/": {
            "domain": "airline",
            "split": "test",
            "agent_model": AGENT_MODEL,
            "user_model": "org/customer",
            "num_trials": 1,
            "max_steps": 30,
            "max_errors": 10,
            "concurrency": 1,
        },
        "/runs/new/": run,
        "/races/new/": {**run, "agent_model": [AGENT_MODEL, "Qwen/Qwen3-32B:cerebras"]},
        "/play/new/": {"domain": "airline", "split": "test"},
    }


@pytest.mark.parametrize(
    ("seed", "reason"),
    [
        (2**63, "Ensure this value is less than or equal to 9223372036854775807."),
        (10**23, "Ensure this value is less than or equal to 9223372036854775807."),
        (-(2**63) - 1, "Ensure this value is greater than or equal to -9223372036854775808."),
        ("9" * 5000, "Enter a whole number."),
    ],
)
@pytest.mark.parametrize("path", ["/evaluations/new/", "/runs/new/", "/races/new/", "/play/new/"])
def test_a_seed_beyond_its_column_is_refused_by_the_form_and_nothing_is_stored(
    path, seed, reason, alice, agent_models, settings
):
    from apps.evaluations.models import Evaluation
    from apps.races.models import Race
    from apps.runs.models import Run

    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0  # whatever started stays queued
    client = signed_in(alice)
    client.raise_request_exception = True  # a 500 fails with its traceback

    response = client.post(path, {**_start_forms()[path], "seed": seed})

    # The form comes back with the reason under the seed, as for any other mistake.
    assert response.status_code == 400, response.status_code
    assert reason in response.content.decode()
    assert not (Evaluation.objects.exists() or Race.objects.exists() or Run.objects.exists())


@pytest.mark.parametrize("path", ["/evaluations/new/", "/runs/new/", "/races/new/", "/play/new/"])
def test_the_largest_seed_the_columns_hold_starts(path, alice, agent_models, settings):
    from apps.runs.models import Run

    settings.TAU2_EVAL_MAX_IN_FLIGHT = 0
    client = signed_in(alice)
    client.raise_request_exception = True

    response = client.post(path, {**_start_forms()[path], "seed": 2**63 - 1})

    assert response.status_code == 302, response.content.decode()[-3000:]
    assert Run.objects.filter(given_seed=2**63 - 1).exists()


def test_a_stored_tool_result_nested_too_deep_to_parse_is_shown_as_it_is(alice):
    """A tool's result is text, which the file (or a model, or a tool) may make JSON
    100,000 levels deep: the run page and compare show it, unparsed."""
    from apps.evaluations.imports import evaluation_import
    from tests.support.evaluations import results_file

    call = {"id": "c1", "name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "id": "c1", "content": "[" * 100_000 + "]" * 100_000},
    ]
    data = results_file(num_trials=2, simulations=2)
    for sim in data["simulations"]:
        sim["messages"] = messages
    first, second = evaluation_import(user=alice, data=json.dumps(data).encode()).runs.all()
    client = signed_in(alice)
    client.raise_request_exception = True

    page = client.get(f"/runs/{first.pk}/")
    assert page.status_code == 200 and "[" * 100_000 in page.content.decode()
    assert client.get(f"/runs/compare/?ids={first.pk},{second.pk}").status_code == 200

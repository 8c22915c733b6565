"""A model call retried is told while it happens and kept on its message (issue 33).

The customer's model, on the scripted local server, times out, is rate limited or
answers 503 a few times, then answers. The run goes on; its page's socket heard
"retrying (2 of 3)" as it happened; the stored message has every attempt and the whole
call's time, across them (the newcomer saw "30670 ms" for a turn of 6.5 minutes). A
refused key is asked once; retries spent end the run failed, with a reason that says so.
Timeouts are tiny here (``TAU2_LLM_TIMEOUT``): no test waits 120 s.
"""

from __future__ import annotations

import json
import re
import threading

import pytest
from django.template.loader import render_to_string
from websockets.sync.client import connect

from apps.runs import runner
from apps.runs.models import Run, RunEvent
from apps.runs.presenters import timing_view
from apps.runs.runner import run_execute
from tau2_env.llm import gateway
from tests.support.llm_server import Reply, delayed, error, text
from tests.support.scripts import (
    finished,
    gold_script,
    is_agent_request,
    queued_run,
    run_start,
    wait_for,
)

TINY = 0.5  # seconds each attempt may take in these tests


def _customer_fails(llm_server, times: int, failure: Reply) -> list:
    """The gold script, but the customer's first ``times`` calls get ``failure``; returns
    the customer's requests as they come."""
    gold_script(llm_server)
    gold = llm_server.responder
    lock = threading.Lock()
    seen: list = []

    def respond(request):
        if not is_agent_request(request):
            with lock:
                seen.append(request)
                n = len(seen)
            if n <= times:
                return failure
        return gold(request)

    llm_server.responder = respond
    return seen


@pytest.fixture
def quick(monkeypatch, settings):
    """Tiny timeouts, and one retry of a failed hop at once (as the test worker has it)."""
    monkeypatch.setenv("TAU2_LLM_TIMEOUT", str(TINY))
    settings.TAU2_RUN_TRANSIENT_RETRIES = 1
    settings.TAU2_RUN_BACKOFF_SECONDS = 0.0


def _retried(run: Run) -> RunEvent:
    (event,) = run.events.filter(attempts__isnull=False)
    return event


@pytest.mark.parametrize(
    ("failure", "outcome", "said"),
    [
        (delayed(text("too late"), 3.0), "timeout", f"timed out after {TINY:g} s"),
        (error(429, "slow down"), "rate_limited", "rate limited (HTTP 429)"),
        (error(503, "overloaded"), "provider_error", "provider unavailable (HTTP 503)"),
    ],
    ids=["timeout", "429", "503"],
)
def test_a_call_retried_twice_is_kept_with_its_three_attempts_and_its_whole_time(
    committed_db, quick, llm_server, alice, alice_client, failure, outcome, said
):
    customer = _customer_fails(llm_server, 2, failure)
    run = queued_run(alice)

    assert run_execute(run_id=run.pk, worker="retries-test") == Run.Status.COMPLETED

    run.refresh_from_db()
    assert run.reward == 1.0
    event = _retried(run)
    assert event.kind == RunEvent.Kind.CUSTOMER and event.seq == 1  # the customer's opening
    assert [a["outcome"] for a in event.attempts] == [outcome, outcome, "answered"]
    assert [a["said"] for a in event.attempts] == [said, said, "answered"]
    assert {a["role"] for a in event.attempts} == {"user"}
    assert event.latency_ms / 1000 >= sum(a["seconds"] for a in event.attempts)
    if outcome == "timeout":
        assert event.latency_ms >= 2 * TINY * 1000
    assert len(customer) >= 3
    # τ²'s own message is as τ² made it: nothing of ours in it.
    assert "attempts" not in event.message and "latency_ms" not in event.message

    page = alice_client.get(f"/runs/{run.pk}/").content.decode()
    (attempts,) = re.findall(r'<details class="attempts"[^>]*>(.*?)</details>', page)
    assert 'data-attempts="3"' in page and "<summary>3 attempts</summary>" in attempts
    items = re.findall(r"<li>(.*?)</li>", attempts)
    assert [item.split(", ")[0] for item in items] == [
        f"customer: {said}",
        f"customer: {said}",
        "customer: answered",
    ]
    assert "title=" not in re.search(r'<div class="who">.*?</div>', page, re.S).group(0)


def test_a_call_whose_retries_are_spent_is_tried_again_as_a_hop_and_timed_from_its_first_try(
    committed_db, quick, llm_server, alice, monkeypatch
):
    # Three 503s spend the call's retries; the worker tries the hop again, which answers.
    _customer_fails(llm_server, 3, error(503, "overloaded"))
    told: list[gateway.CallNotice] = []
    publish = runner.call_publish

    def heard(*, run_id, notice):
        told.append(notice)
        publish(run_id=run_id, notice=notice)

    monkeypatch.setattr(runner, "call_publish", heard)
    run = queued_run(alice)

    assert run_execute(run_id=run.pk, worker="retries-test") == Run.Status.COMPLETED

    phases = [(n.phase, n.attempt, n.attempts) for n in told if n.role == "user"][:6]
    assert phases == [
        ("waiting", 1, 3),
        ("retrying", 2, 3),
        ("retrying", 3, 3),
        ("failed", 3, 3),
        ("again", 2, 2),  # the turn's second try, of 1 + TAU2_RUN_TRANSIENT_RETRIES
        ("waiting", 1, 3),
    ]
    again = next(n for n in told if n.phase == "again")
    assert again.reason == "provider unavailable (HTTP 503)" and again.wait == 0.0

    event = _retried(Run.objects.get(pk=run.pk))
    assert [a["outcome"] for a in event.attempts] == ["provider_error"] * 3 + ["answered"]
    assert event.latency_ms / 1000 >= sum(a["seconds"] for a in event.attempts)


def test_a_rate_limited_customer_is_asked_again_after_its_retry_after(
    committed_db, quick, llm_server, alice, monkeypatch
):
    # The provider says "Retry-After: 1": the run's page hears the wait, the customer's
    # model is asked again no sooner, and the run goes on.
    customer = _customer_fails(llm_server, 1, error(429, "slow down", retry_after="1"))
    told: list[gateway.CallNotice] = []
    publish = runner.call_publish

    def heard(*, run_id, notice):
        told.append(notice)
        publish(run_id=run_id, notice=notice)

    monkeypatch.setattr(runner, "call_publish", heard)
    run = queued_run(alice)

    assert run_execute(run_id=run.pk, worker="retries-test") == Run.Status.COMPLETED

    (retrying,) = [n for n in told if n.phase == "retrying"]
    assert (retrying.role, retrying.attempt, retrying.attempts) == ("user", 2, 3)
    assert (retrying.reason, retrying.wait) == ("rate limited (HTTP 429)", 1.0)
    assert customer[1].received_at - customer[0].received_at >= 1.0
    assert customer[0].raw == customer[1].raw
    event = _retried(Run.objects.get(pk=run.pk))
    assert [a["outcome"] for a in event.attempts] == ["rate_limited", "answered"]
    assert event.latency_ms >= 1000


def test_a_refused_key_is_asked_once(committed_db, quick, llm_server, alice):
    customer = _customer_fails(llm_server, 100, error(401, "bad key"))
    run = queued_run(alice)

    assert run_execute(run_id=run.pk, worker="retries-test") == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure == Run.Failure.PROVIDER
    assert len(customer) == 1
    assert "(HTTP 401)" in run.error and "attempts" not in run.error


def test_retries_spent_end_the_run_failed_saying_how_many_attempts_it_made(
    committed_db, quick, llm_server, alice, alice_client
):
    customer = _customer_fails(llm_server, 100, delayed(text("too late"), 3.0))
    run = queued_run(alice)

    assert run_execute(run_id=run.pk, worker="retries-test") == Run.Status.FAILED

    run.refresh_from_db()
    assert run.status == Run.Status.FAILED and run.failure == Run.Failure.TRANSIENT
    assert run.error.startswith("The customer's model call failed: ")
    assert f"no answer within {TINY:g} s" in run.error and "(3 attempts in " in run.error
    assert len(customer) == 3 * 2  # the call's 3 attempts, in each of the hop's 2 tries
    assert "3 attempts in" in alice_client.get(f"/runs/{run.pk}/").content.decode()


@pytest.mark.slow
def test_a_running_runs_page_hears_retrying_2_of_3_as_it_happens(
    asgi_server, celery_worker, llm_server, alice, alice_client
):
    # Through the real worker and the real socket: 503, 503, then the answer.
    _customer_fails(llm_server, 2, error(503, "overloaded"))
    started = run_start(alice_client)
    calls: list[dict] = []
    cookie = f"sessionid={alice_client.cookies['sessionid'].value}"
    with connect(
        asgi_server.ws_url(f"/ws/runs/{started.pk}/?after=-1&calls=1"),
        additional_headers={"Cookie": cookie, "Origin": asgi_server.url},
        open_timeout=10,
    ) as ws:
        for _ in range(400):
            data = json.loads(ws.recv(timeout=30))
            if data["type"] == "call":
                calls.append(data)
            elif data["type"] == "status" and data["final"]:
                break
    done = wait_for(started, finished)
    assert done.reward == 1.0
    retrying = [c for c in calls if c["phase"] == "retrying"]
    assert [(c["side"], c["attempt"], c["attempts"]) for c in retrying] == [
        ("customer", 2, 3),
        ("customer", 3, 3),
    ], calls
    assert retrying[0]["reason"] == "provider unavailable (HTTP 503)"
    assert len(_retried(done).attempts) == 3


@pytest.mark.parametrize(
    ("latency_ms", "attempts", "took", "n"),
    [
        (133_338, None, "2 min 13 s", 0),  # a run stored before attempts were kept
        (30_670, [], "30.7 s", 0),
        (640, None, "640 ms", 0),
        (
            497_000,
            [
                {"role": "user", "outcome": "timeout", "seconds": 120.0, "said": "timed out"},
                {"role": "user", "outcome": "timeout", "seconds": 120.0, "said": "timed out"},
                {"role": "user", "outcome": "answered", "seconds": 257.0, "said": "answered"},
            ],
            "8 min 17 s",
            3,
        ),
    ],
)
def test_a_messages_time_reads_in_minutes_and_seconds_with_its_attempts(
    latency_ms, attempts, took, n
):
    view = timing_view(latency_ms, attempts)
    assert (view["took"], view["attempts_n"]) == (took, n)
    if n:
        assert view["attempts_lines"] == [
            "customer: timed out, 2 min 0 s",
            "customer: timed out, 2 min 0 s",
            "customer: answered, 4 min 17 s",
        ]


@pytest.mark.parametrize("attempts", [None, [{"role": "agent", "seconds": 1.0}] * 2])
def test_a_reply_of_tool_calls_only_shows_its_time(attempts):
    """Issue 33: a message that was only tool calls showed no call time (only when it
    took several attempts); it shows its time and tokens above its calls."""
    event = {
        "kind": "agent",
        "seq": 3,
        "content": "",
        "reasoning": "",
        "tokens": "1,234",
        "tool_calls": [{"id": "call_1", "name": "get_user_details", "arguments": "{}"}],
        **timing_view(2_400, attempts),
    }
    html = render_to_string("includes/run_event.html", {"e": event})
    assert '<span class="muted took" data-testid="took">· 2.4 s</span>' in html
    assert "· 1,234 tokens" in html
    assert html.index('data-testid="took"') < html.index('data-testid="tool-call"')
    assert ('data-testid="attempts"' in html) == bool(attempts)

"""Each LLM call told as it happens (issue 33): ``gateway.observe_calls`` hears a call
start, each retry (which attempt of how many, why, the wait) and its end, with its total
time (all its attempts included); the call and its request are unchanged (a retry sends
the same bytes), and an observer that fails never fails the call."""

from __future__ import annotations

import email.utils
import threading
import time

import httpx
import pytest

from tau2_env.engine.episodes import Episode
from tau2_env.llm import compat, gateway, outbound
from tau2_env.llm.llm_args import ROLE_KEY
from tests.support.llm_server import answer, delayed, error, text

MESSAGES = [{"role": "user", "content": "Hi"}]


def _route(llm_server, *, timeout: float = 30.0) -> gateway.Route:
    return gateway.Route(
        provider="openai_compatible",
        model="m",
        base_url=llm_server.base_url,
        api_key="sk-test-key-0123456789",
        timeout=timeout,
        label="mine",
    )


def test_a_call_is_told_as_it_waits_and_when_it_answers_with_its_time(llm_server):
    llm_server.responder = lambda request: delayed(text("Hello"), 0.5)
    heard: list[gateway.CallNotice] = []
    with gateway.conversation(user=_route(llm_server)), gateway.observe_calls(heard.append):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert [(n.role, n.phase) for n in heard] == [("user", "waiting"), ("user", "answered")]
    assert heard[0].timeout == 30.0 and heard[1].seconds >= 0.5


def test_a_failed_call_is_told_with_its_time_including_retries(llm_server):
    llm_server.responder = lambda request: error(429, "slow down")
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server)),
        gateway.observe_calls(heard.append),
        pytest.raises(gateway.LLMCallError) as failed,
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert [n.phase for n in heard] == ["waiting", "retrying", "retrying", "failed"]
    assert len(llm_server.chat_requests()) == gateway.RETRIES + 1 == 3  # as litellm made them
    last = heard[-1]
    assert (last.attempt, last.attempts, last.reason) == (3, 3, "rate limited (HTTP 429)")
    assert [t.outcome for t in last.tries] == ["rate_limited"] * 3
    assert "(3 attempts in " in str(failed.value) and failed.value.transient


@pytest.fixture(params=["litellm", "direct"])
def sender(request, monkeypatch, llm_server):
    """Calls made by plain litellm, or by the direct path (its first call of the shape,
    answered, checked by litellm; the others sent direct, a failure read by litellm)."""
    if request.param == "direct":
        compat.install()
        path = compat.DirectPath()
        monkeypatch.setattr(gateway, "_send", path.complete)
        llm_server.responder = lambda r: text("warm")
        with gateway.conversation(user=_route(llm_server, timeout=TINY)):
            gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})
        llm_server.requests.clear()
        return path
    monkeypatch.setattr(gateway, "_send", gateway._litellm_completion)
    return None


TINY = 0.4  # each attempt's timeout: no test waits 120 s


def _failing(times: int, failure):
    """A responder that answers ``failure`` to the first ``times`` calls, then "Hello"."""
    seen = []

    def respond(request):
        seen.append(request)
        return failure if len(seen) <= times else text("Hello")

    return respond


@pytest.mark.parametrize(
    ("failure", "said", "outcome"),
    [
        (delayed(text("late"), 2.0), f"timed out after {TINY:g} s", "timeout"),
        (error(429, "slow down"), "rate limited (HTTP 429)", "rate_limited"),
        (error(503, "overloaded"), "provider unavailable (HTTP 503)", "provider_error"),
    ],
    ids=["timeout", "429", "503"],
)
def test_each_retry_is_told_as_it_happens_and_the_answer_carries_every_attempt(
    llm_server, sender, failure, said, outcome
):
    llm_server.responder = _failing(2, failure)
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(heard.append),
    ):
        response = gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert response.choices[0].message.content == "Hello"
    assert [n.phase for n in heard] == ["waiting", "retrying", "retrying", "answered"]
    first, second = heard[1], heard[2]
    assert (first.attempt, first.attempts, first.reason) == (2, 3, said)
    assert (second.attempt, second.attempts, second.reason) == (3, 3, said)
    assert first.wait == second.wait == gateway.RETRY_WAIT
    answered = heard[-1]
    assert [t.outcome for t in answered.tries] == [outcome, outcome, "answered"]
    assert answered.seconds >= sum(t.seconds for t in answered.tries)
    if outcome == "timeout":
        assert all(t.seconds >= TINY for t in answered.tries[:2])
    # Three requests, byte for byte the same: a retry resends the call as it was.
    bodies = [r.body for r in llm_server.chat_requests()]
    assert len(bodies) == 3 and len(set(map(repr, bodies))) == 1
    if sender is not None:
        assert sender.counts["replayed"] == 2 and sender.counts["direct"] == 1


@pytest.mark.parametrize("status", [401, 402, 400])
def test_a_refused_key_or_request_is_never_retried(llm_server, sender, status):
    llm_server.responder = lambda request: error(status, "no")
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(heard.append),
        pytest.raises(gateway.LLMCallError) as failed,
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert len(llm_server.chat_requests()) == 1
    assert [n.phase for n in heard] == ["waiting", "failed"]
    assert "attempts" not in str(failed.value) and not failed.value.transient


def test_litellm_is_given_no_retry_policy_it_makes_one_attempt_per_call(llm_server):
    call = gateway.litellm_kwargs(_route(llm_server))
    assert "retry_policy" not in call and "num_retries" not in call
    assert call["max_retries"] == 0


def test_an_observer_that_fails_never_fails_the_call_nor_changes_its_request(llm_server):
    llm_server.responder = lambda request: text("Hello")

    def broken(notice: gateway.CallNotice) -> None:
        raise RuntimeError("page gone")

    with gateway.conversation(user=_route(llm_server)):
        plain = gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})
        with gateway.observe_calls(broken):
            observed = gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert observed.choices[0].message.content == plain.choices[0].message.content == "Hello"
    first, second = llm_server.chat_requests()
    assert first.body == second.body


def test_a_reply_that_cannot_be_read_is_told_as_failed_and_never_retried(llm_server):
    llm_server.responder = lambda request: answer('{"model": "m", "choices": []}')
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server)),
        gateway.observe_calls(heard.append),
        pytest.raises(gateway.LLMCallError) as failed,
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert failed.value.kind == "bad_reply"
    assert [n.phase for n in heard] == ["waiting", "failed"]
    assert [t.outcome for t in heard[-1].tries] == ["bad_reply"]
    assert len(llm_server.chat_requests()) == 1


# --- Retry-After (issue 33 item 4) ----------------------------------------------------------
# A provider's 429 or 503 may say how long to wait: the next attempt is sent no sooner, the
# notice says the wait ("retrying in 7 s"), and the retry still sends the same bytes.


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_in_seconds_is_waited_before_the_next_attempt(llm_server, sender, status):
    llm_server.responder = _failing(1, error(status, "slow down", retry_after="1"))
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(heard.append),
    ):
        response = gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert response.choices[0].message.content == "Hello"
    assert [n.phase for n in heard] == ["waiting", "retrying", "answered"]
    retrying = heard[1]
    assert (retrying.attempt, retrying.attempts, retrying.wait) == (2, 3, 1.0)
    first, second = llm_server.chat_requests()
    assert second.received_at - first.received_at >= 1.0
    assert first.raw == second.raw  # the retry resends the call byte for byte
    assert heard[-1].seconds >= 1.0


def test_a_retry_after_as_an_http_date_is_waited_until_that_date(llm_server, sender):
    when = email.utils.formatdate(time.time() + 2, usegmt=True)
    llm_server.responder = _failing(1, error(429, "slow down", retry_after=when))
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(heard.append),
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    wait = heard[1].wait
    assert 0 < wait <= 2.0  # the date has a second's resolution
    first, second = llm_server.chat_requests()
    assert second.received_at - first.received_at >= wait


def test_a_retry_after_longer_than_a_call_waits_ends_the_call_saying_so(
    llm_server, sender, monkeypatch
):
    monkeypatch.setenv("TAU2_LLM_RETRY_AFTER_MAX", "5")
    llm_server.responder = _failing(1, error(429, "slow down", retry_after="300"))
    heard: list[gateway.CallNotice] = []
    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(heard.append),
        pytest.raises(gateway.LLMCallError) as failed,
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert len(llm_server.chat_requests()) == 1  # not asked again before its time
    assert [n.phase for n in heard] == ["waiting", "failed"]
    said = str(failed.value)
    assert "rate limited (HTTP 429)" in said and "asks to wait 300 s" in said
    assert "(5 s, TAU2_LLM_RETRY_AFTER_MAX)" in said and "try again later" in said
    assert failed.value.kind == "rate_limited" and not failed.value.transient


def test_a_stop_during_a_retry_after_wait_ends_the_call_at_once(llm_server, sender):
    llm_server.responder = lambda request: error(429, "slow down", retry_after="30")
    stop = threading.Event()
    heard: list[gateway.CallNotice] = []

    def hear(notice: gateway.CallNotice) -> None:
        heard.append(notice)
        if notice.phase == "retrying":
            stop.set()  # the run is stopped while its call waits to try again

    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(hear),
        outbound.interruptible(stop),
        pytest.raises(gateway.LLMCallError) as failed,
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert failed.value.kind == "interrupted"
    assert [n.phase for n in heard] == ["waiting", "retrying", "failed"]
    assert heard[1].wait == 30.0 and heard[-1].seconds < 30.0
    assert len(llm_server.chat_requests()) == 1


class _Refused(Exception):
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        super().__init__("refused")
        self.status_code = status
        self.response = httpx.Response(status, headers=headers)


@pytest.mark.parametrize(
    ("status", "headers", "wait"),
    [
        (429, {"Retry-After": "7"}, 7.0),
        (503, {"retry-after": "0"}, 0.0),
        (429, {"Retry-After": "Fri, 04 Dec 2026 12:00:10 GMT"}, 10.0),
        (429, {"Retry-After": "Fri, 04 Dec 2026 11:59:00 GMT"}, 0.0),  # already past
        (429, {"retry-after-ms": "1500"}, 1.5),
        (429, {"Retry-After": "soon"}, None),
        (429, {}, None),
        (500, {"Retry-After": "7"}, None),  # only a 429's or a 503's is honoured
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(status, headers, wait):
    now = email.utils.parsedate_to_datetime("Fri, 04 Dec 2026 12:00:00 GMT").timestamp()
    assert gateway.retry_after(_Refused(status, headers), now=now) == wait


def test_a_runs_retry_after_waits_add_up_to_its_budget_then_the_call_ends_saying_so(llm_server):
    """Issue 33: each wait was bounded (TAU2_LLM_RETRY_AFTER_MAX) but a run could wait
    many times. Within an episode's budget (TAU2_LLM_RETRY_AFTER_RUN_MAX) the waits add
    up; the one that would pass it ends the call, in words, without asking again."""
    asked = {"n": 0}

    def responder(request):
        asked["n"] += 1
        return error(429, "slow down", retry_after="1") if asked["n"] % 2 else text("ok")

    llm_server.responder = responder
    heard: list[gateway.CallNotice] = []
    budget = gateway.WaitBudget(1.5)
    with (
        gateway.conversation(user=_route(llm_server, timeout=TINY)),
        gateway.observe_calls(heard.append),
        gateway.waits_bounded(budget),
    ):
        gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})  # waits 1 s
        with pytest.raises(gateway.LLMCallError) as failed:
            gateway.routed_completion(messages=MESSAGES, **{ROLE_KEY: "user"})

    assert asked["n"] == 3  # the second call's 429 was not followed by another request
    assert budget.waited == 1.0
    assert [n.phase for n in heard] == ["waiting", "retrying", "answered", "waiting", "failed"]
    said = str(failed.value)
    assert "rate limited (HTTP 429)" in said and "asks to wait 1 s more" in said
    assert "this run has waited 1 s on providers' Retry-After already" in said
    assert "a run waits at most 1.5 s in all (TAU2_LLM_RETRY_AFTER_RUN_MAX)" in said
    assert failed.value.kind == "rate_limited" and not failed.value.transient


def test_an_episodes_calls_take_their_waits_from_its_budget(monkeypatch):
    monkeypatch.setenv("TAU2_LLM_RETRY_AFTER_RUN_MAX", "42")
    route = gateway.Route(
        provider="openai_compatible", model="m", base_url="http://x/v1", api_key="sk-test"
    )
    episode = Episode(domain="airline", task_id="0", user_llm=route)
    assert episode.waits.seconds == 42.0
    with episode.llm_context():
        assert gateway._wait_budget.get() is episode.waits
    assert gateway._wait_budget.get() is None

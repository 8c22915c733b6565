"""The outbound policy on every way a model call leaves the server: where it may go, how
long it may take, how much it may read, and a stop that ends it.

The endpoints are :class:`tests.support.hostile_endpoint.HostileEndpoint`s on loopback:
loopback is refused unless ``TAU2_OUTBOUND_ALLOW`` names it, so the suite's own setting
(which allows it) is removed where a test needs the policy's default.
"""

from __future__ import annotations

import threading
import time

import pytest

from tau2_env.llm import compat, gateway, outbound, wire
from tau2_env.llm.llm_args import ROLE_KEY
from tests.support.hostile_endpoint import Behaviour, HostileEndpoint

COMPLETION = {
    "id": "c1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


@pytest.fixture
def endpoint():
    compat.install()
    with HostileEndpoint() as served:
        yield served


@pytest.fixture
def no_allow_list(monkeypatch):
    monkeypatch.delenv("TAU2_OUTBOUND_ALLOW", raising=False)


def _route(
    endpoint: HostileEndpoint, *, provider="openai_compatible", timeout=30.0
) -> gateway.Route:
    base = endpoint.base_url if provider != "anthropic" else f"http://127.0.0.1:{endpoint.port}"
    return gateway.Route(
        provider=provider,
        model="m",
        base_url=base,
        api_key="sk-test-key-0123456789",
        timeout=timeout,
        label="mine",
    )


def _ask(route: gateway.Route):
    with gateway.conversation(user=route):
        return gateway.routed_completion(
            messages=[{"role": "user", "content": "hello"}], **{ROLE_KEY: "user"}
        )


# ------------------------------------------------------------------ destinations


@pytest.mark.parametrize("provider", sorted(set(gateway.LITELLM_PREFIXES) - {"hf"}))
def test_a_call_to_a_loopback_endpoint_is_refused_in_words_and_never_sent(
    endpoint, no_allow_list, provider
):
    endpoint.behaviour = Behaviour("json", payload=COMPLETION)

    with pytest.raises(gateway.LLMCallError) as refused:
        _ask(_route(endpoint, provider=provider))

    assert refused.value.kind == "not_allowed"
    assert "loopback address" in str(refused.value)
    assert "TAU2_OUTBOUND_ALLOW" in str(refused.value)
    assert not refused.value.transient
    assert endpoint.requests == 0


def test_the_operator_may_allow_loopback(endpoint, monkeypatch):
    monkeypatch.setenv("TAU2_OUTBOUND_ALLOW", "127.0.0.0/8")
    endpoint.behaviour = Behaviour("json", payload=COMPLETION)

    answer = _ask(_route(endpoint))

    assert answer.choices[0].message.content == "hi"
    assert endpoint.requests == 1


def test_the_operators_own_endpoint_is_always_allowed_but_not_its_neighbours(
    endpoint, no_allow_list, monkeypatch
):
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint.base_url)
    endpoint.behaviour = Behaviour("json", payload=COMPLETION)
    assert _ask(_route(endpoint)).choices[0].message.content == "hi"

    with HostileEndpoint() as neighbour, pytest.raises(gateway.LLMCallError) as refused:
        _ask(_route(neighbour))
    assert refused.value.kind == "not_allowed"


@pytest.mark.parametrize(
    "url, what",
    [
        ("http://10.1.2.3:8000/v1", "private"),
        ("http://172.16.0.9/v1", "private"),
        ("http://192.168.1.1/v1", "private"),
        ("http://169.254.169.254/latest", "link-local"),
        ("http://[fd00::1]:8000/v1", "private"),
        ("http://metadata.google.internal/v1", "metadata"),
        ("http://0.0.0.0:8000/v1", "unspecified"),
        ("http://[::ffff:127.0.0.1]:6379/", "loopback"),
        ("http://100.64.0.1/v1", "private"),
    ],
)
def test_forms_learn_a_url_is_refused_before_anything_is_sent(no_allow_list, url, what):
    with pytest.raises(outbound.DestinationRefused, match=what):
        outbound.check_url(url)


def test_a_public_address_passes_and_an_allowed_network_too(monkeypatch):
    monkeypatch.setenv("TAU2_OUTBOUND_ALLOW", "10.0.0.0/8, my-vllm")
    outbound.check_url("http://8.8.8.8/v1")
    outbound.check_url("http://10.1.2.3:8000/v1")
    outbound.check_url("http://my-vllm:8000/v1")  # by name, whatever it resolves to
    with pytest.raises(outbound.DestinationRefused):
        outbound.check_url("http://192.168.1.1/v1")


def test_redirects_are_not_followed(endpoint):
    endpoint.behaviour = Behaviour("json", payload=COMPLETION)
    with HostileEndpoint() as redirecting:
        redirecting.behaviour = Behaviour(
            "redirect", location=f"{endpoint.base_url}/chat/completions"
        )
        with pytest.raises(gateway.LLMCallError):
            _ask(_route(redirecting))
        assert redirecting.requests == 1
    assert endpoint.requests == 0


# ------------------------------------------------------------------ time and size


def test_an_endpoint_that_trickles_is_cut_at_the_calls_deadline(endpoint):
    endpoint.behaviour = Behaviour("trickle", interval=0.2)
    client = outbound.client()

    started = time.monotonic()
    try:
        client.post(f"{endpoint.base_url}/chat/completions", json={}, timeout=2.0)
    except Exception as exc:  # noqa: BLE001 - what it was is the assertion
        failure = exc
    else:
        pytest.fail("a trickling answer was read whole")
    took = time.monotonic() - started

    assert isinstance(failure.__cause__, outbound.DeadlineExceeded)
    assert "no complete answer within 2 s" in str(failure)
    assert took < 2.0 + outbound.POLL_SECONDS + 1.0


def test_a_run_call_to_a_trickling_endpoint_fails_as_a_timeout_in_words(endpoint):
    endpoint.behaviour = Behaviour("trickle", interval=0.2)

    with pytest.raises(gateway.LLMCallError) as failed:
        _ask(_route(endpoint, timeout=1.0))

    assert failed.value.kind == "timeout"
    assert "did not finish its answer in time" in str(failed.value)
    # litellm tries a timed-out call twice more; each attempt had the one deadline.
    assert endpoint.requests == 1 + gateway.RETRIES


def test_an_endpoint_that_says_nothing_is_a_plain_timeout(endpoint):
    endpoint.behaviour = Behaviour("silent")

    with pytest.raises(gateway.LLMCallError) as failed:
        _ask(_route(endpoint, timeout=1.0))

    assert failed.value.kind == "timeout" and failed.value.transient
    assert "no answer within 1 s" in str(failed.value)


@pytest.mark.parametrize("chunked", [False, True])
def test_an_answer_past_the_cap_is_refused_without_being_read(endpoint, monkeypatch, chunked):
    monkeypatch.setenv("TAU2_LLM_MAX_REPLY_BYTES", str(1024 * 1024))
    endpoint.behaviour = Behaviour("huge", size=300 * 1024 * 1024, chunked=chunked)

    with pytest.raises(gateway.LLMCallError) as failed:
        _ask(_route(endpoint))

    assert failed.value.kind == "too_large"
    assert "1 MiB" in str(failed.value)
    assert not failed.value.transient
    time.sleep(0.2)
    assert endpoint.bytes_sent < 64 * 1024 * 1024  # the server was stopped far short


def test_a_compressed_answer_is_capped_as_it_is_decompressed(endpoint, monkeypatch):
    monkeypatch.setenv("TAU2_LLM_MAX_REPLY_BYTES", str(1024 * 1024))
    endpoint.behaviour = Behaviour("gzip_bomb", size=200 * 1024 * 1024)

    with pytest.raises(gateway.LLMCallError) as failed:
        _ask(_route(endpoint))

    assert failed.value.kind == "too_large"
    assert "decompressed past 1 MiB" in str(failed.value)


def test_a_stop_ends_a_call_in_flight_within_seconds(endpoint):
    endpoint.behaviour = Behaviour("trickle", interval=0.2)
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()

    started = time.monotonic()
    with outbound.interruptible(stop), pytest.raises(gateway.LLMCallError) as failed:
        _ask(_route(endpoint, timeout=60.0))

    assert failed.value.kind == "interrupted"
    assert time.monotonic() - started < 0.5 + outbound.POLL_SECONDS + 1.5


# ------------------------------------------------------------------ the direct path


def _post(pool: wire.Pool, endpoint: HostileEndpoint, *, timeout: float = 30.0) -> wire.Answer:
    return pool.post(
        f"{endpoint.base_url}/chat/completions",
        headers=[("Host", f"127.0.0.1:{endpoint.port}"), ("Content-Length", "2")],
        body=b"{}",
        timeout=timeout,
    )


def test_the_direct_path_keeps_the_same_destinations(endpoint, no_allow_list):
    with pytest.raises(wire.WireError) as refused:
        _post(wire.Pool(), endpoint)
    assert isinstance(refused.value.cause, outbound.DestinationRefused)
    assert endpoint.requests == 0


def test_the_direct_path_keeps_the_same_deadline(endpoint):
    endpoint.behaviour = Behaviour("trickle", interval=0.2)
    started = time.monotonic()
    with pytest.raises(wire.WireError) as failed:
        _post(wire.Pool(), endpoint, timeout=1.5)
    assert isinstance(failed.value.cause, outbound.DeadlineExceeded)
    assert time.monotonic() - started < 1.5 + outbound.POLL_SECONDS + 1.0


@pytest.mark.parametrize("chunked", [False, True])
def test_the_direct_path_keeps_the_same_cap(endpoint, monkeypatch, chunked):
    monkeypatch.setenv("TAU2_LLM_MAX_REPLY_BYTES", str(1024 * 1024))
    endpoint.behaviour = Behaviour("huge", size=300 * 1024 * 1024, chunked=chunked)
    with pytest.raises(wire.WireError) as failed:
        _post(wire.Pool(), endpoint)
    assert isinstance(failed.value.cause, outbound.ReplyTooLarge)


def test_the_direct_path_answers_as_before_within_the_bounds(endpoint):
    endpoint.behaviour = Behaviour("json", payload=COMPLETION)
    answer = _post(wire.Pool(), endpoint)
    assert answer.status == 200 and b'"hi"' in answer.body


# ------------------------------------------------------------------ unreadable replies


@pytest.mark.parametrize(
    "payload",
    [
        {"choices": "nope"},
        {k: v for k, v in COMPLETION.items() if k != "model"},
        {"id": "x", "object": "list", "data": [{"id": "internal-secret-service"}]},
    ],
    ids=["choices-not-a-list", "no-model", "another-api"],
)
def test_a_reply_that_cannot_be_read_is_the_endpoints_fault_in_words(endpoint, payload):
    endpoint.behaviour = Behaviour("json", payload=payload)

    with pytest.raises(gateway.LLMCallError) as failed:
        _ask(_route(endpoint))

    message = str(failed.value)
    assert failed.value.kind == "bad_reply", message
    assert "Internal error" not in message and "HTTP 500" not in message
    assert "internal-secret-service" not in message

"""What goes out to the LLM is what plain litellm sends for the same call.

``tau2_env.llm.compat.install()`` keeps litellm's price-list lookups (failures too) and more
of its clients, and sends calls to OpenAI-style endpoints by its direct path
(:class:`tau2_env.llm.compat.DirectPath`), all to spend less CPU per call. None may change a
byte of what goes out. Conversations are played through the engine (τ²'s user simulator
and τ²'s own agent, through ``routed_completion``) against the local scripted server;
every call's keyword arguments, as τ² and the route made them, are noted; the same calls
are made again by plain ``litellm.completion`` in a fresh interpreter that never imports
``tau2_env``. The server must receive the same requests: the same bytes of body and the
same headers (all of them but the connection's own). The answers are read as litellm
reads them: the same response, message, usage and τ²'s cost, for the same bytes.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import litellm
import pytest
from litellm import utils as litellm_utils
from tau2.utils import llm_utils as tau2_llm_utils

from tau2_env.engine import catalog
from tau2_env.engine.episodes import Episode
from tau2_env.llm import compat, gateway, wire
from tests.support.llm_server import answer as raw_answer
from tests.support.llm_server import error, text, tool_call
from tests.support.scripts import gold_script

try:  # litellm 1.110's; absent in 1.82.6 (τ² 1.x's), where this module is skipped
    from litellm.litellm_core_utils import fallback_generalizations
except ImportError:
    fallback_generalizations = None

# The direct path and compat's lookups read litellm 1.110.2's internals: on τ² 1.x's litellm
# (1.82.6) they are off, and these tests with them.
pytestmark = pytest.mark.litellm_hooks

ROOT = Path(__file__).resolve().parents[2]
TOKENS = ("hf_request_alice_0123456789", "hf_request_bob_0123456789")
# Headers of the connection rather than of the request.
CONNECTION_HEADERS = {"host", "connection", "accept-encoding"}

PLAIN = """
import json, sys
import litellm
from litellm.types.router import RetryPolicy
litellm.suppress_debug_info = True
litellm.drop_params = True  # as tau2.utils.llm_utils sets it
for call in json.load(sys.stdin):
    if call.get("retry_policy") is not None:
        call["retry_policy"] = RetryPolicy(**call["retry_policy"])
    try:
        litellm.completion(**call)
    except Exception as exc:
        print(type(exc).__name__)
assert not [name for name in sys.modules if name.startswith("tau2")], "plain: no tau2_env"
print("done")
"""


def _plain_litellm(calls: list[dict]) -> None:
    """Make ``calls`` with plain ``litellm.completion`` in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAU2_", "HF_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    done = subprocess.run(
        [sys.executable, "-c", PLAIN],
        input=json.dumps(calls),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("done")


def _json_ready(call: dict) -> dict:
    ready = dict(call)
    if ready.get("retry_policy") is not None:
        ready["retry_policy"] = ready["retry_policy"].model_dump()
    return json.loads(json.dumps(ready))


def _headers(request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items() if k.lower() not in CONNECTION_HEADERS}


@pytest.fixture
def noted_calls(monkeypatch, direct):
    """Every routed call's keyword arguments (what litellm.completion would get), as made
    (then made by ``direct``)."""
    calls: list[dict] = []
    send = direct.complete

    def noting(call):
        calls.append(copy.deepcopy(call))
        return send(call)

    monkeypatch.setattr(gateway, "_send", noting)
    return calls


@pytest.fixture
def direct(monkeypatch):
    """A fresh direct path (nothing checked yet), and its counts."""
    compat.install()
    path = compat.DirectPath()
    monkeypatch.setattr(gateway, "_send", path.complete)
    return path


def _assert_plain_litellm_sends_the_same(llm_server, calls: list[dict]) -> list:
    ours = llm_server.chat_requests()
    assert len(ours) == len(calls)
    llm_server.requests.clear()

    _plain_litellm([_json_ready(call) for call in calls])

    plain = llm_server.chat_requests()
    assert len(plain) == len(ours)
    for mine, theirs in zip(ours, plain, strict=True):
        assert mine.path == theirs.path
        assert mine.raw == theirs.raw  # the body, byte for byte
        assert _headers(mine) == _headers(theirs)
    return ours


def _route(llm_server, token: str, model: str = "scripted/customer") -> gateway.Route:
    return gateway.Route(provider="hf", model=model, base_url=llm_server.base_url, api_key=token)


def _play(llm_server, token: str, *, llm_args: dict | None = None) -> None:
    task = catalog.get_tau2_task("airline", "2")
    route = _route(llm_server, token)
    episode = Episode(domain="airline", task=task, user_llm=route, user_llm_args=llm_args)
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "mia_li_3668"})
    episode.say("Hello Mia, how can I help you today?")
    episode.say("Could you give me your reservation id?")


def test_the_customers_requests_are_the_bytes_plain_litellm_sends(llm_server, noted_calls, direct):
    llm_server.responder = lambda request: "I'd like to change my flight, please."
    for token in TOKENS:  # two keys: two clients kept, each asked again
        _play(llm_server, token)
        _play(llm_server, token, llm_args={"temperature": 0.3, "top_p": 0.9, "seed": 7})
    assert len(noted_calls) == 12
    # Most went by the direct path: the first of each shape and kind went by litellm.
    assert direct.counts["direct"] >= 8, direct.counts
    assert direct.counts["replayed"] == direct.counts["litellm"] == 0

    ours = _assert_plain_litellm_sends_the_same(llm_server, noted_calls)
    # The calls differed where the conversations did: the same check on every shape.
    assert {r.token for r in ours} == set(TOKENS)
    assert any(r.body.get("temperature") == 0.3 for r in ours)
    assert len({len(r.messages) for r in ours}) > 1


def test_a_model_run_sends_the_agents_tool_calls_as_plain_litellm_does(
    llm_server, noted_calls, direct
):
    gold_script(llm_server)
    for seed in (1, 2):
        episode = Episode(
            domain="airline",
            task_id="27",
            user_llm=_route(llm_server, TOKENS[0]),
            agent_llm=_route(llm_server, TOKENS[1], model="scripted/agent"),
            agent_llm_args={"temperature": 0.0},
            seed=seed,
        )
        assert episode.run() == "ended"
        assert episode.reward_info.reward == 1.0
    assert direct.counts["direct"] >= 5, direct.counts  # the second run's, at least

    ours = _assert_plain_litellm_sends_the_same(llm_server, noted_calls)
    # The agent's calls carry τ²'s tool schemas and earlier tool calls and results.
    agent = [r for r in ours if r.body.get("tools")]
    assert agent and all(r.body["tool_choice"] == "auto" for r in agent)
    roles = {m["role"] for r in agent for m in r.messages}
    assert roles == {"system", "user", "assistant", "tool"}
    assert any(m.get("tool_calls") for r in agent for m in r.messages)


def test_a_telecom_customer_with_phone_tools_sends_as_plain_litellm_does(
    llm_server, noted_calls, direct
):
    def responder(request):
        done = any(m["role"] == "tool" for m in request.messages)
        return text("It shows no signal at all.") if done else tool_call("check_status_bar")

    llm_server.responder = responder
    task_id = catalog.get_domain("telecom").splits["base"][0]
    for token in TOKENS:
        episode = Episode(domain="telecom", task_id=task_id, user_llm=_route(llm_server, token))
        episode.start()
        episode.say("Could you look at your phone's status bar?")
        episode.say("Thanks. And what does it say about mobile data?")
    assert direct.counts["direct"] >= 4, direct.counts

    ours = _assert_plain_litellm_sends_the_same(llm_server, noted_calls)
    assert all(r.body.get("tools") for r in ours)  # the customer's phone tools
    assert any(m["role"] == "tool" for r in ours for m in r.messages)


ANSWERS = {
    "text": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1796000000,
        "model": "gpt-4.1-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    },
    "tool calls, reasoning, usage details, unknown fields": {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 1796000001,
        "model": "scripted/agent",
        "system_fingerprint": "fp_1",
        "service_tier": "default",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "They want their details.",
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {
                                "name": "get_user_details",
                                "arguments": '{"user_id": "x"}',
                            },
                        },
                        {
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "get_flight_status", "arguments": "{}"},
                        },
                    ],
                    "provider_extra": {"kept": True},
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "total_tokens": 120,
            "completion_tokens_details": {"reasoning_tokens": 7},
            "prompt_tokens_details": {"cached_tokens": 64},
        },
    },
    "no usage": {
        "id": "chatcmpl-3",
        "object": "chat.completion",
        "created": 1796000002,
        "model": "scripted/customer",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Ok"},
                "finish_reason": "length",
            }
        ],
    },
}


@pytest.mark.parametrize("answer", list(ANSWERS), ids=list(ANSWERS))
def test_an_answer_reads_as_litellm_reads_it(llm_server, direct, answer):
    """The same bytes answered to litellm and to the direct path: the same response,
    τ²'s raw message, usage and cost (a priced model too: ``gpt-4.1-mini``)."""
    raw = json.dumps(ANSWERS[answer])
    llm_server.responder = lambda request: raw_answer(raw)
    model = ANSWERS[answer]["model"]
    route = _route(llm_server, TOKENS[0], model=model)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]

    def call() -> dict:
        return {"messages": copy.deepcopy(messages), "tools": None, "tool_choice": None,
                **gateway.litellm_kwargs(route)}  # fmt: skip

    plain = litellm.completion(**call())
    direct.complete(call())  # the check: by litellm
    before = direct.counts["direct"]
    ours = direct.complete(call())
    assert direct.counts["direct"] == before + 1

    assert ours.model_dump() == plain.model_dump()
    assert ours.choices[0].to_dict() == plain.choices[0].to_dict()  # τ²'s raw_data
    assert tau2_llm_utils.get_response_usage(ours) == tau2_llm_utils.get_response_usage(plain)
    assert tau2_llm_utils.get_response_cost(ours) == tau2_llm_utils.get_response_cost(plain)
    if model == "gpt-4.1-mini":
        assert tau2_llm_utils.get_response_cost(ours) > 0
    for name in ("custom_llm_provider", "region_name", "additional_headers"):
        theirs = plain._hidden_params[name]
        mine = ours._hidden_params[name]
        if name == "additional_headers":  # the date may have ticked
            theirs = {k: v for k, v in theirs.items() if k != "llm_provider-date"}
            mine = {k: v for k, v in mine.items() if k != "llm_provider-date"}
        assert mine == theirs


def test_a_failed_direct_call_fails_as_litellm_fails_it_without_sending_twice(llm_server, direct):
    route = _route(llm_server, TOKENS[0])
    messages = [{"role": "user", "content": "Hi"}]

    def call() -> dict:
        return {"messages": copy.deepcopy(messages), **gateway.litellm_kwargs(route)}

    llm_server.responder = lambda request: "Hello."
    direct.complete(call())  # the check
    llm_server.requests.clear()
    llm_server.responder = lambda request: error(401, "Invalid credentials in Authorization header")
    with pytest.raises(litellm.AuthenticationError) as raised:
        direct.complete(call())
    assert raised.value.status_code == 401
    assert "Invalid credentials" in str(raised.value)
    assert len(llm_server.chat_requests()) == 1  # never sent again: litellm read our answer
    assert direct.counts["replayed"] == 1 and direct.counts["direct"] == 0

    # litellm makes one attempt (it is given no retry policy): a 429 is litellm's error.
    llm_server.requests.clear()
    llm_server.responder = lambda request: error(429, "slow down")
    with pytest.raises(litellm.RateLimitError):
        direct.complete(call())
    assert len(llm_server.chat_requests()) == 1 and direct.counts["replayed"] == 2

    # The route retries it, as litellm's policy did: 429, then an answer sent direct, the
    # same bytes.
    llm_server.requests.clear()
    replies = [error(429, "slow down"), text("Hello again.")]
    llm_server.responder = lambda request: replies.pop(0)
    with gateway.conversation(user=route):
        response = tau2_llm_utils.completion(**{"messages": messages, gateway.ROLE_KEY: "user"})
    assert response.choices[0].message.content == "Hello again."
    first, second = llm_server.chat_requests()
    assert first.body == second.body
    assert direct.counts["replayed"] == 3 and direct.counts["direct"] == 1

    # Through the route, the error reads as it always has.
    llm_server.responder = lambda request: error(402, "no credits")
    llm_server.requests.clear()
    with (
        gateway.conversation(user=route),
        pytest.raises(gateway.LLMCallError, match="HTTP 402") as wrapped,
    ):
        tau2_llm_utils.completion(**{"messages": messages, gateway.ROLE_KEY: "user"})
    assert wrapped.value.kind == "no_credits"
    assert len(llm_server.chat_requests()) == 1


def test_a_server_that_went_away_fails_as_litellm_fails_it(llm_server, direct, monkeypatch):
    def call(route: gateway.Route) -> dict:
        return {"messages": [{"role": "user", "content": "Hi"}], **gateway.litellm_kwargs(route)}

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    with pytest.raises(Exception) as plain:
        litellm.completion(
            **call(gateway.Route(provider="hf", model="m", base_url=gone, api_key=TOKENS[0]))
        )

    route = _route(llm_server, TOKENS[0], model="m")
    llm_server.responder = lambda request: "Hello."
    direct.complete(call(route))  # the check, then the server is gone
    refused = ConnectionRefusedError(111, "Connection refused")

    def post(*args, **kwargs):
        raise wire.WireError(f"ConnectionRefusedError: {refused}", cause=refused)

    monkeypatch.setattr(direct._pool, "post", post)
    with pytest.raises(Exception) as ours:
        direct.complete(call(route))
    assert direct.counts["replayed"] == 1
    assert type(ours.value) is type(plain.value)  # litellm's own mapping of a lost server
    assert str(ours.value) == str(plain.value)


def test_a_message_litellm_sends_otherwise_never_goes_direct(llm_server, direct, monkeypatch):
    """Were litellm to send a message differently from what the direct path would, that
    kind of message goes by litellm from then on."""
    monkeypatch.setattr(compat, "_as_sent", lambda message: {**message, "name": "changed"})
    llm_server.responder = lambda request: "Hello."
    route = _route(llm_server, TOKENS[0])
    for _ in range(3):
        direct.complete(
            {"messages": [{"role": "user", "content": "Hi"}], **gateway.litellm_kwargs(route)}
        )
    assert direct.counts["direct"] == 0
    assert direct.counts["checked"] == 1 and direct.counts["litellm"] == 2
    assert all("name" not in r.messages[0] for r in llm_server.chat_requests())


@pytest.mark.parametrize(
    ("variable", "value"), [("TAU2_LLM_DIRECT", "off"), ("HTTPS_PROXY", "http://127.0.0.1:9")]
)
def test_calls_go_by_litellm_when_the_direct_path_is_off_or_a_proxy_is_set(
    llm_server, direct, monkeypatch, variable, value
):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # httpx's requests reach the server still
    monkeypatch.setenv(variable, value)
    llm_server.responder = lambda request: "Hello."
    route = _route(llm_server, TOKENS[0])
    for _ in range(2):
        direct.complete(
            {"messages": [{"role": "user", "content": "Hi"}], **gateway.litellm_kwargs(route)}
        )
    assert direct.counts == {"direct": 0, "checked": 0, "litellm": 2, "replayed": 0}


def test_a_model_litellm_does_not_know_is_looked_up_again_only_as_it_answered():
    compat.install()
    kept = litellm_utils.get_model_info_helper
    assert hasattr(kept, "__wrapped__")  # installed by tau2_env.llm.compat
    model = "openai/scripted/not-in-the-price-list"
    with pytest.raises(Exception) as first:
        kept(model=model, custom_llm_provider="openai")
    with pytest.raises(Exception) as again:
        kept(model=model, custom_llm_provider="openai")
    assert type(again.value) is type(first.value)
    assert str(again.value) == str(first.value)
    with pytest.raises(Exception) as unkept:
        kept.__wrapped__(model=model, custom_llm_provider="openai")
    assert str(unkept.value) == str(first.value)
    # A price registered since is found at once: the price list is part of the key.
    litellm.register_model(
        {
            "openai/scripted/not-in-the-price-list": {
                "input_cost_per_token": 1e-6,
                "output_cost_per_token": 2e-6,
                "litellm_provider": "openai",
                "mode": "chat",
            }
        }
    )
    try:
        found = kept(model=model, custom_llm_provider="openai")
        assert found["input_cost_per_token"] == 1e-6
    finally:
        litellm.model_cost.pop("openai/scripted/not-in-the-price-list", None)


def test_the_fallback_rules_answer_as_before_when_remembered():
    compat.install()
    rules = fallback_generalizations._registry
    assert hasattr(rules.match_capabilities, "__wrapped__")
    names = ["openai/gpt-4.1-mini", "openai/deepseek-ai/DeepSeek-V4.1-Flash", "scripted/x"]
    for name in names * 2:
        remembered = rules.match_capabilities(name)
        assert remembered == rules.match_capabilities.__wrapped__(name)
        if remembered is not None:
            remembered["mutated"] = True  # a caller's change is its own copy's
            assert "mutated" not in (rules.match_capabilities(name) or {})

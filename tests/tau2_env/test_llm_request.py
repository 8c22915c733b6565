"""The customer's LLM requests are what plain litellm sends for the same call.

``tau2_env.compat.install()`` keeps litellm's price-list lookups (failures too) and more
of its clients, to spend less CPU per call. Neither may change a byte of what goes out: a
conversation is played through the engine (τ²'s user simulator, through
``routed_completion``) against the local scripted server, every call's keyword arguments
to ``litellm.completion`` are noted as τ² and the route made them, and the same calls are
made again by plain ``litellm.completion`` in a fresh interpreter that never imports
``tau2_env``. The server must receive the same requests: the same JSON bodies and the same
headers (all of them but the connection's own).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import litellm
import pytest
from litellm import utils as litellm_utils
from litellm.litellm_core_utils import fallback_generalizations

from tau2_env import catalog, compat, llm
from tau2_env.engine import Episode

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
    litellm.completion(**call)
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
def noted_calls(monkeypatch):
    """Every call's keyword arguments to ``litellm.completion``, as made."""
    calls: list[dict] = []
    completion = litellm.completion

    def noting(**kwargs):
        calls.append(copy.deepcopy(kwargs))
        return completion(**kwargs)

    monkeypatch.setattr(litellm, "completion", noting)
    return calls


def _play(llm_server, token: str, *, llm_args: dict | None = None) -> None:
    task = catalog.get_tau2_task("airline", "2")
    route = llm.Route(
        provider="hf", model="scripted/customer", base_url=llm_server.base_url, api_key=token
    )
    episode = Episode(domain="airline", task=task, user_llm=route, user_llm_args=llm_args)
    episode.start()
    episode.call_tool("get_user_details", {"user_id": "mia_li_3668"})
    episode.say("Hello Mia, how can I help you today?")
    episode.say("Could you give me your reservation id?")


def test_the_customers_requests_are_the_bytes_plain_litellm_sends(llm_server, noted_calls):
    llm_server.responder = lambda request: "I'd like to change my flight, please."
    for token in TOKENS:  # two keys: two clients kept, each asked again
        _play(llm_server, token)
        _play(llm_server, token, llm_args={"temperature": 0.3, "top_p": 0.9, "seed": 7})
    ours = llm_server.chat_requests()
    assert len(ours) == len(noted_calls) == 12
    llm_server.requests.clear()

    _plain_litellm([_json_ready(call) for call in noted_calls])

    plain = llm_server.chat_requests()
    assert len(plain) == len(ours)
    for mine, theirs in zip(ours, plain, strict=True):
        assert mine.path == theirs.path
        assert mine.body == theirs.body
        assert _headers(mine) == _headers(theirs)
    # The calls differed where the conversations did: the same check on every shape.
    assert {r.token for r in ours} == set(TOKENS)
    assert any(r.body.get("temperature") == 0.3 for r in ours)
    assert len({len(r.messages) for r in ours}) > 1


def test_a_model_litellm_does_not_know_is_looked_up_again_only_as_it_answered():
    compat.install()
    kept = litellm_utils.get_model_info_helper
    assert hasattr(kept, "__wrapped__")  # installed by tau2_env.compat
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

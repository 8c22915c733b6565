"""τ²'s LLM arguments as a person or a client may set them (tau2_env.llm.llm_args)."""

import pytest
from tau2.config import DEFAULT_LLM_ARGS_AGENT, DEFAULT_LLM_ARGS_USER

from tau2_env.llm import gateway
from tau2_env.llm.llm_args import (
    DEFAULT_AGENT_ARGS,
    DEFAULT_USER_ARGS,
    LLMArgsError,
    llm_args_clean,
    llm_args_label,
    llm_args_of,
)


def test_the_defaults_are_tau2s_own():
    assert DEFAULT_AGENT_ARGS == DEFAULT_LLM_ARGS_AGENT
    assert DEFAULT_USER_ARGS == DEFAULT_LLM_ARGS_USER


def test_named_arguments_and_extras_in_order():
    args = llm_args_clean(
        temperature=0.3,
        top_p=0.9,
        max_tokens=512,
        reasoning_effort="high",
        extras='{"top_k": 20, "thinking": {"type": "enabled", "budget_tokens": 1024}}',
    )
    assert args == {
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 512,
        "reasoning_effort": "high",
        "top_k": 20,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
    }
    assert list(args) == [
        "temperature",
        "top_p",
        "max_tokens",
        "reasoning_effort",
        "top_k",
        "thinking",
    ]
    # Nothing given: no argument at all (the provider's defaults), as a flag naming none.
    assert llm_args_clean() == {}


@pytest.mark.parametrize(
    ("given", "field", "words"),
    [
        ({"temperature": 3}, "temperature", "between 0 and 2"),
        ({"temperature": float("nan")}, "temperature", "a number"),
        ({"top_p": -0.1}, "top_p", "between 0 and 1"),
        ({"max_tokens": 0}, "max_tokens", "at least 1"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort", "one of"),
        ({"extras": "{not json"}, "extras", "not JSON"),
        ({"extras": "[1, 2]"}, "extras", "JSON object"),
        ({"extras": '{"api_key": "sk-mine"}'}, "extras", "connection's"),
        ({"extras": '{"api_base": "http://elsewhere"}'}, "extras", "connection's"),
        ({"extras": '{"seed": 1}'}, "extras", "each trial's"),
        ({"extras": '{"messages": []}'}, "extras", "τ²'s own"),
        ({"extras": '{"tau2_llm_role": "agent"}'}, "extras", "cannot be set"),
        ({"temperature": 0.5, "extras": '{"temperature": 1}'}, "extras", "set above"),
        ({"extras": '{"a": {"b": {"c": {"d": {"e": {"f": 1}}}}}}'}, "extras", "four levels"),
        ({"extras": "{" + ",".join(f'"k{i}": {i}' for i in range(600)) + "}"}, "extras", "longer"),
    ],
)
def test_what_cannot_be_set_is_refused_with_the_field_and_a_reason(given, field, words):
    with pytest.raises(LLMArgsError) as refused:
        llm_args_clean(**given)
    assert refused.value.field == field
    assert words in str(refused.value)


def test_every_route_key_is_reserved():
    for key in (*gateway.ROUTE_KEYS, gateway.ROLE_KEY):
        with pytest.raises(LLMArgsError):
            llm_args_clean(extras={key: "x"})


def test_stored_arguments_are_checked_again_and_keep_their_order():
    assert llm_args_of(None, default=DEFAULT_AGENT_ARGS) == {"temperature": 0.0}
    assert list(llm_args_of({"top_k": 5, "temperature": 1}, default={})) == ["top_k", "temperature"]
    with pytest.raises(LLMArgsError):
        llm_args_of({"api_key": "sk-x"}, default={})
    with pytest.raises(LLMArgsError):
        llm_args_of(["temperature"], default={})


def test_labels_read_as_people_write_them():
    assert llm_args_label(None) == "τ² default"
    assert llm_args_label({}) == "provider defaults"
    assert llm_args_label({"temperature": 0.0, "reasoning_effort": "high", "top_k": 20}) == (
        "temperature 0 · reasoning_effort high · top_k 20"
    )
    assert llm_args_label({"thinking": {"type": "enabled"}}) == 'thinking {"type": "enabled"}'

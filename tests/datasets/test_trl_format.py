"""A downloaded row goes through the steps TRL's SFTTrainer and DPOTrainer take before
tokenizing (trl 1.16's ``tokenize_fn``): ``json.loads`` of a string ``tools`` column, then
the chat template rendered with ``tools=`` by transformers' own Jinja renderer.

The template below is written for this test in the common shape of tool-calling templates
(tools listed as JSON, tool calls as JSON blocks, tool results as their own turns); it reads
arguments either as the JSON string OpenAI's format (and the download) holds or as a dict.
"""

from __future__ import annotations

import json

import datasets
import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from tau2_env.engine import catalog
from tests.support.scored_runs import GOLD, LOOKUP, certificate, stored_run
from tests.support.scripts import GOLD_CERTIFICATE

TEMPLATE = (
    "{%- if tools %}<|tools|>{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}<|end|>"
    "{% endif %}"
    "{%- for message in messages %}<|{{ message.role }}|>"
    "{%- if message.content %}{{ message.content }}{% endif %}"
    "{%- for call in message.tool_calls or [] %}{% set arguments = call.function.arguments %}"
    '<call>{"name": "{{ call.function.name }}", "arguments": '
    "{% if arguments is string %}{{ arguments }}{% else %}{{ arguments | tojson }}{% endif %}"
    "}</call>{% endfor %}"
    '{%- if message.role == "tool" %}<id>{{ message.tool_call_id }}</id>{% endif %}<|end|>\n'
    "{% endfor %}"
)


@pytest.fixture
def rows(alice, alice_client, llm_server, tmp_path):
    # airline/27 solved as each τ² expects, then failed with a $100 certificate.
    stored_run(alice, llm_server, GOLD, model="org/model-a")
    stored_run(alice, llm_server, [LOOKUP, certificate(100)], model="org/model-a")

    def load(query: str) -> list[dict]:
        response = alice_client.get(f"/datasets/download/?{query}")
        path = tmp_path / f"{query.replace('=', '-')}.jsonl"
        path.write_bytes(b"".join(response.streaming_content))
        return datasets.load_dataset(
            "json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
        ).to_list()

    return load


def test_an_sft_row_renders_with_its_tools_as_trl_renders_it(rows):
    row = rows("type=sft")[1]  # the $100 run: a read and a write on every τ²
    tools = json.loads(row["tools"]) if isinstance(row["tools"], str) else row["tools"]
    (text,), _ = render_jinja_template(
        conversations=[row["messages"]], tools=tools, chat_template=TEMPLATE
    )
    for tool in catalog.get_domain("airline").tools:
        assert json.dumps(tool.schema["function"]["name"]) in text
    assert catalog.get_domain("airline").policy in text
    assert (
        '<call>{"name": "send_certificate", "arguments": '
        '{"user_id": "ethan_martin_2396", "amount": 100}}</call>' in text
    )
    tool_turns = [m for m in row["messages"] if m["role"] == "tool"]
    assert len(tool_turns) == 2
    for turn in tool_turns:
        assert f"<|tool|>{turn['content']}<id>{turn['tool_call_id']}</id>" in text


def test_a_preference_row_renders_prompt_with_chosen_and_with_rejected(rows):
    (pair,) = rows("type=preference")
    tools = json.loads(pair["tools"])
    (chosen, rejected), _ = render_jinja_template(
        conversations=[pair["prompt"] + pair["chosen"], pair["prompt"] + pair["rejected"]],
        tools=tools,
        chat_template=TEMPLATE,
    )
    (prompt,), _ = render_jinja_template(
        conversations=[pair["prompt"]], tools=tools, chat_template=TEMPLATE
    )
    # TRL tokenizes prompt, prompt + chosen and prompt + rejected: the prompt opens both.
    assert chosen.startswith(prompt) and rejected.startswith(prompt) and chosen != rejected
    # The calls' arguments (the customer's own certificates read "amount": 100.0).
    assert '"amount": 100}' in rejected and '"amount": 100}' not in chosen
    assert ('"amount": 150}' in chosen) == GOLD_CERTIFICATE  # 1.x's gold sends none

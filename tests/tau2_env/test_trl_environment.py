"""The TRL environment (``tau2_env.faces.trl_environment``): the class TRL 1.16's
``GRPOTrainer(environment_factory=...)`` makes per generation, read the way TRL reads it
(tools: the class's public functions; their schemas: transformers' ``get_json_schema``),
played against the live server on a studio key, with the customer a scripted LLM."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import pickle
import re
import sys
import time
import types
from typing import Any

import pytest
from tau2.agent.llm_agent import LLMAgent
from transformers import TrainingArguments
from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import render_jinja_template

from apps.agents.credentials import install, studio_credentials
from apps.agents.services import api_key_create, api_key_revoke
from tau2_env.engine import catalog
from tau2_env.faces import agent_session, trl_environment
from tau2_env.faces.training_data import prompt_dataset
from tau2_env.faces.trl_environment import Tau2Environment, tau2_environment, tau2_environments
from tau2_env.gate import access
from tau2_env.llm._tau2 import registry
from tau2site.asgi import application
from tests.support.agents import agent_runs_of
from tests.support.people import ALICE_TOKEN
from tests.support.scripts import gold_script

DOMAINS = ("airline", "retail", "telecom")
GOLD_USER = "ethan_martin_2396"

# What get_json_schema cannot say of τ²'s schemas, tool by tool: the arguments whose
# items are a τ² model (``$defs``/``$ref``), that have a default, whose description has
# line breaks. Everywhere else, and for these once the residue is taken out, equality.
RESIDUE = {
    "airline.book_reservation": {"nested": ["flights", "passengers", "payment_methods"]},
    "airline.update_reservation_flights": {"nested": ["flights"]},
    "airline.update_reservation_passengers": {"nested": ["passengers"]},
    "telecom.get_bills_for_customer": {"default": ["limit"]},
    "retail.exchange_delivered_order_items": {"lines": ["new_item_ids", "payment_method_id"]},
    "retail.return_delivered_order_items": {"lines": ["payment_method_id"]},
}


def _tools_as_trl_reads_them(env: object) -> dict[str, Any]:
    """TRL 1.16's GRPOTrainer: the public functions of the environment's class but reset
    and get_reward, taken from the instance (bound methods)."""
    return {
        name: getattr(env, name)
        for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def _unconnected(cls: type) -> object:
    """An instance of ``cls`` that has not connected (its methods are only read)."""
    return cls.__new__(cls)


def _taus_tools(domain: str) -> dict[str, dict]:
    """τ²'s own ``openai_schema`` of each agent tool of ``domain``."""
    environment = registry.get_env_constructor(domain)()
    return {tool.name: tool.openai_schema for tool in environment.get_tools()}


def _without_titles(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _without_titles(v) for k, v in node.items() if k != "title"}
    if isinstance(node, list):
        return [_without_titles(v) for v in node]
    return node


def _expressible(schema: dict) -> tuple[dict, dict[str, list[str]]]:
    """τ²'s ``schema`` with what get_json_schema cannot express taken out, and where it
    was: no ``title`` anywhere; an optional argument's ``default`` dropped; items that
    are "a τ² model or any object" (``anyOf`` of a ``$ref`` and a free object) as
    ``object``, ``$defs`` dropped; an argument's description with its line breaks (and the
    spaces around them) as one space, as get_json_schema joins a description's lines."""
    residue: dict[str, list[str]] = {}
    parameters = _without_titles(schema["function"]["parameters"])
    defs = parameters.pop("$defs", None)
    required = parameters.get("required", [])
    for name, argument in parameters["properties"].items():
        if "default" in argument:
            assert name not in required
            del argument["default"]
            residue.setdefault("default", []).append(name)
        options = argument.get("items", {}).get("anyOf")
        if options:
            ref, free = options
            assert ref["$ref"].removeprefix("#/$defs/") in defs
            assert free == {"additionalProperties": True, "type": "object"}
            argument["items"] = {"type": "object"}
            residue.setdefault("nested", []).append(name)
        if "\n" in argument.get("description", ""):
            argument["description"] = re.sub(r"\s*\n+\s*", " ", argument["description"])
            residue.setdefault("lines", []).append(name)
    assert (defs is None) == ("nested" not in residue)
    function = {**schema["function"], "parameters": parameters}
    return {**schema, "function": function}, residue


@pytest.mark.parametrize("domain", DOMAINS)
def test_every_tool_reads_as_taus_schema_through_get_json_schema(domain):
    methods = _tools_as_trl_reads_them(_unconnected(tau2_environment(domain=domain)))
    taus = _taus_tools(domain)

    assert set(methods) == set(taus) | {"respond_to_user"}
    residues = {}
    for name, schema in taus.items():
        expected, residue = _expressible(schema)
        assert get_json_schema(methods[name]) == expected, name
        if residue:
            residues[f"{domain}.{name}"] = residue
    assert residues == {k: v for k, v in RESIDUE.items() if k.startswith(f"{domain}.")}
    # What a chat template gets for them (transformers' rendering, as TRL calls it).
    rendered, _ = render_jinja_template(
        conversations=[[{"role": "user", "content": "Hi"}]],
        tools=list(methods.values()),
        chat_template="{{ tools | tojson }}",
    )
    assert json.loads(rendered[0]) == [get_json_schema(m) for m in methods.values()]


@pytest.mark.parametrize("domain", DOMAINS)
def test_respond_to_user_reads_as_the_servers_schema_exactly(domain):
    (served,) = [t for t in agent_session.tool_specs(domain) if t["name"] == "respond_to_user"]
    method = _unconnected(tau2_environment(domain=domain)).respond_to_user

    assert get_json_schema(method)["function"] == {
        "name": "respond_to_user",
        "description": served["description"],
        "parameters": served["input_schema"],
    }


def test_only_the_domains_tools_are_offered_to_the_model():
    cls = tau2_environment(domain="airline")

    # No `done` (τ²'s agent has none), nothing of the connection's.
    assert "done" not in _tools_as_trl_reads_them(_unconnected(cls))
    assert _tools_as_trl_reads_them(_unconnected(Tau2Environment)) == {}
    assert tau2_environment(domain="airline") is cls
    assert tau2_environments() == {d: tau2_environment(domain=d) for d in DOMAINS}
    with pytest.raises(KeyError, match="nowhere"):
        tau2_environment(domain="nowhere")


def test_the_classes_pickle_by_name_for_trls_asynchronous_trainer():
    factories = tau2_environments()

    assert pickle.loads(pickle.dumps(factories)) == factories  # noqa: S301 - our own bytes
    assert trl_environment.Tau2TelecomEnv is factories["telecom"]


def test_the_prompt_dataset_has_one_row_per_task_of_the_split():
    dataset = prompt_dataset(domain="retail", split="train", seed=3)

    assert list(dataset["task_id"]) == list(catalog.get_domain("retail").splits["train"])
    assert set(dataset["domain"]) == {"retail"} and set(dataset["environment"]) == {"retail"}
    assert set(dataset["split"]) == {"train"} and set(dataset["seed"]) == {3}
    system, greeting, user = dataset[0]["prompt"]
    assert system == {"role": "system", "content": _taus_system_prompt("retail")}
    assert greeting == {"role": "assistant", "content": "Hi! How can I help you today?"}
    assert user == {"role": "user", "content": ""}
    with pytest.raises(KeyError, match="Unknown split 'nope'"):
        prompt_dataset(domain="retail", split="nope")


def _taus_system_prompt(domain: str) -> str:
    """What τ²'s own LLMAgent sends as its system message in ``domain``."""
    environment = registry.get_env_constructor(domain)()
    agent = LLMAgent(tools=environment.get_tools(), domain_policy=environment.get_policy(), llm="x")
    return agent.system_prompt


def test_without_a_server_it_says_what_to_set(monkeypatch):
    monkeypatch.delenv("TAU2_URL", raising=False)
    with pytest.raises(ValueError, match="set TAU2_URL"):
        tau2_environment(domain="airline")()


# ------------------------------------------------------------- on the live server


@pytest.fixture
def alice_key(alice):
    install()
    return api_key_create(user=alice, name="trl")[1]


@pytest.fixture
def heard_headers():
    """The headers each request to the agent faces came with (the studio's resolver
    then answers as it always does)."""
    heard: list[dict[str, str]] = []

    def resolve(request: access.ClientRequest) -> access.Credentials:
        heard.append(dict(request.headers))
        return studio_credentials(request)

    access.set_credentials_resolver(resolve)
    yield heard
    install()


@pytest.fixture
def trainer_env(asgi_server, llm_server, alice, alice_key, monkeypatch):
    """As TRL makes it: the airline class, called with no argument, configured from the
    environment. Closed afterwards, once the server has recorded its episodes' ends."""
    monkeypatch.setenv("TAU2_URL", asgi_server.url)
    monkeypatch.setenv("TAU2_API_KEY", alice_key)
    monkeypatch.setenv("TAU2_TRAINING_SESSION", "alice's first GRPO")
    gold_script(llm_server)
    with tau2_environment(domain="airline")() as env:
        started = []
        reset = env.reset

        def counted_reset(**row):
            opening = reset(**row)
            started.append(row)
            return opening

        env.reset = counted_reset  # the instance's: TRL reads the class's functions
        yield env
    # Each episode is a run, written by the server's recorder as it goes; one left open
    # is stopped by the close.
    agent_runs_of(alice, count=len(started), final=True)


def _gold_row() -> dict:
    dataset = prompt_dataset(domain="airline", split="base")
    (row,) = [r for r in dataset if r["task_id"] == "27"]
    return row


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
def test_the_environment_plays_a_golden_episode_to_reward_1(
    trainer_env, llm_server, alice, heard_headers
):
    row = _gold_row()
    opening = trainer_env.reset(**row)
    # What TRL does with it: appended to the prompt's last message.
    prompt = row["prompt"][:-1] + [{**row["prompt"][-1], "content": opening}]
    tools = _tools_as_trl_reads_them(trainer_env)
    task = catalog.get_tau2_task("airline", "27")
    results = [
        tools[action.name](**action.arguments)
        for action in task.evaluation_criteria.actions  # τ²'s expected actions
    ]
    said = trainer_env.respond_to_user(message="I have sent you a $150 certificate.")

    assert opening == "Hi, my flight was delayed and I want compensation. I'm ethan_martin_2396."
    assert prompt == [
        {"role": "system", "content": _taus_system_prompt("airline")},
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": opening},
    ]
    assert GOLD_USER in results[0] and "Certificate" in results[1]
    assert said == "Thanks, that's all. ###STOP###"
    assert trainer_env.get_reward() == 1.0
    verdict = trainer_env.verdict
    assert verdict["termination_reason"] == "user_stop" and verdict["reward_info"]["reward"] == 1.0
    assert {r.token for r in llm_server.chat_requests()} == {ALICE_TOKEN}  # the key's owner's
    (run,) = agent_runs_of(alice)
    assert (run.status, run.reward, run.provenance["task_id"]) == ("completed", 1.0, "27")
    assert {h.get("x-tau2-training-session") for h in heard_headers} == {"alice's first GRPO"}


def test_a_tool_error_comes_back_as_taus_error_text(trainer_env):
    trainer_env.reset(**_gold_row())

    said = trainer_env.get_user_details(user_id="nobody_0000")
    unknown = trainer_env.send_certificate(user_id=GOLD_USER)  # no amount

    assert said == "Error: User nobody_0000 not found"  # τ²'s words
    assert unknown.startswith("Error: ") and "amount" in unknown
    assert trainer_env.get_user_details(user_id=GOLD_USER).startswith("{")  # it goes on


# τ² 0.2's airline/27 expects a $150 certificate, 1.0.1's none
@pytest.mark.legacy_tau2
def test_get_reward_without_done_ends_the_conversation_and_returns_taus_reward(
    trainer_env, llm_server, alice
):
    trainer_env.reset(**_gold_row())
    trainer_env.get_user_details(user_id=GOLD_USER)
    trainer_env.send_certificate(user_id=GOLD_USER, amount=150)

    reward = trainer_env.get_reward()  # the model stopped: no respond_to_user, no done

    assert reward == 1.0  # τ²'s: the database is as expected, nothing to communicate
    assert trainer_env.verdict["termination_reason"] == "agent_stop"
    (run,) = agent_runs_of(alice)
    assert (run.status, run.reward) == ("completed", 1.0)
    assert run.termination_reason == "agent_stop"
    assert trainer_env.get_reward() == 1.0  # asked again: the same, nothing sent


def test_a_row_without_the_prompt_gets_the_policy_with_the_opening(trainer_env):
    opening = trainer_env.reset(domain="airline", task_id="27")

    system, customer = opening.split("\n\n" + "Hi, my flight", 1)
    assert system == _taus_system_prompt("airline")
    with pytest.raises(ValueError, match="retail"):
        trainer_env.reset(domain="retail", task_id="0")


def test_a_session_the_server_closed_while_idle_is_opened_again_at_reset(trainer_env, monkeypatch):
    first = trainer_env.reset(**_gold_row())
    monkeypatch.setattr(application.mcp_app.slots, "idle_seconds", 1)
    trainer_env.get_user_details(user_id=GOLD_USER)  # the connection now waits 1 s at most
    time.sleep(2.5)  # between two of TRL's batches: the server closes it

    assert trainer_env.reset(**_gold_row()) == first
    assert trainer_env.get_user_details(user_id=GOLD_USER).startswith("{")


def test_a_revoked_key_ends_the_session_and_the_next_reset_says_why(trainer_env, alice):
    trainer_env.reset(**_gold_row())
    (key,) = alice.api_keys.all()
    api_key_revoke(user=alice, pk=key.pk)
    (run,) = agent_runs_of(alice)  # the server ended the session, and its episode

    with pytest.raises(ConnectionError, match="Could not open a τ²-bench session") as refused:
        trainer_env.reset(**_gold_row())  # its connection was closed: opened again, refused
    assert str(refused.value).endswith(": This API key was revoked.")
    assert trainer_env.get_reward() is None  # unscored


def test_a_refused_key_is_said_at_construction(asgi_server, llm_server, monkeypatch):
    install()
    monkeypatch.setenv("TAU2_URL", asgi_server.url)
    with pytest.raises(ConnectionError, match="Could not open a τ²-bench session") as refused:
        tau2_environment(domain="airline")(api_key="tau2s_not_a_key")
    assert str(refused.value).endswith(": Unknown API key.")  # the server's words
    assert "tau2s_not_a_key" not in str(refused.value)


# ------------------------------------------------------------- the README's script


class _FakeTRL:
    """``trl`` as far as the script uses it, with TRL 1.16's signatures: GRPOTrainer's
    parameters, GRPOConfig's own fields and transformers' TrainingArguments'."""

    GRPO_TRAINER_PARAMETERS = [
        "model",
        "reward_funcs",
        "args",
        "train_dataset",
        "eval_dataset",
        "processing_class",
        "reward_processing_classes",
        "callbacks",
        "optimizers",
        "quantization_config",
        "peft_config",
        "tools",
        "rollout_func",
        "environment_factory",
    ]
    GRPO_CONFIG_FIELDS = [
        "num_generations",
        "max_completion_length",
        "max_tool_calling_iterations",
        "chat_template_kwargs",
        "log_completions",
        "num_completions_to_print",
        "use_vllm",
        "vllm_mode",
        "temperature",
        "beta",
        "loss_type",
    ]

    def __init__(self):
        self.trainers: list[dict] = []
        self.module = types.ModuleType("trl")
        self.module.GRPOConfig = self._config
        self.module.GRPOTrainer = self._trainer

    def _config(self, **fields):
        known = set(self.GRPO_CONFIG_FIELDS) | {
            f.name for f in dataclasses.fields(TrainingArguments)
        }
        assert set(fields) <= known, set(fields) - known
        return fields

    def _trainer(self, **arguments):
        assert set(arguments) <= set(self.GRPO_TRAINER_PARAMETERS)
        self.trainers.append(arguments)
        return types.SimpleNamespace(train=lambda: arguments.setdefault("trained", True))


def test_the_grpo_example_builds_its_trainer_with_trls_arguments(monkeypatch):
    fake = _FakeTRL()
    monkeypatch.setitem(sys.modules, "trl", fake.module)
    monkeypatch.delitem(sys.modules, "bench.grpo_example", raising=False)
    grpo_example = importlib.import_module("bench.grpo_example")

    grpo_example.main(["--domain", "telecom", "--model", "Qwen/Qwen3-0.6B"])

    (trainer,) = fake.trainers
    assert trainer["environment_factory"] is tau2_environment(domain="telecom")
    assert trainer["reward_funcs"] is None  # the environment's get_reward is the reward
    assert trainer["train_dataset"]["task_id"] == list(
        catalog.get_domain("telecom").splits["train"]
    )
    assert trainer["model"] == "Qwen/Qwen3-0.6B" and trainer["trained"] is True
    config = trainer["args"]
    assert config["per_device_train_batch_size"] % config["num_generations"] == 0

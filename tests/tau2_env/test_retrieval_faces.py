"""banking_knowledge's retrieval configuration (``tau2 run --retrieval-config``) chosen by
an outside agent or trainer: OpenEnv's ``reset(retrieval_config=…)`` over the wire (the
live ASGI server, openenv's own client), and TRL's environment class of a configuration.
Validated and refused in words; the default is the domain's (bm25); the episode's agent
tools are the configuration's. On τ² 0.2 (no banking_knowledge) the refusals say so.

The scripted LLM plays banking's customer (``tests.support.scripts.banking_script``).
"""

from __future__ import annotations

import pickle

import pytest

from apps.agents.credentials import install
from apps.agents.services import api_key_create
from tau2_env import Tau2Env
from tau2_env.faces import trl_environment
from tau2_env.faces.trl_environment import tau2_environment
from tests.support.agents import agent_runs_of
from tests.support.scripts import BANKING_TASK, banking_script

DOMAIN, TASK = BANKING_TASK
SERVER_TOKEN = "hf_server_token_0000000000"


@pytest.fixture
def server_token(llm_server, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", SERVER_TOKEN)
    return SERVER_TOKEN


def _tool_names(env_class) -> set[str]:
    return {name for name in vars(env_class) if not name.startswith("_")} - {
        "domain",
        "retrieval_config",
    }


# --- OpenEnv --------------------------------------------------------------------------


@pytest.mark.upstream
async def test_reset_picks_a_retrieval_configuration_and_lists_its_tools(
    asgi_server, llm_server, server_token
):
    banking_script(llm_server)
    async with Tau2Env(base_url=asgi_server.url) as env:
        grep = await env.reset(domain=DOMAIN, task_id=TASK, retrieval_config="grep_only")
        grep_tools = {t.name for t in await env.list_tools()}
        default = await env.reset(domain=DOMAIN, task_id=TASK)
        default_tools = {t.name for t in await env.list_tools()}

    assert grep.observation.metadata["retrieval_config"] == "grep_only"
    assert "grep" in grep_tools and "KB_search" not in grep_tools
    assert default.observation.metadata["retrieval_config"] == "bm25"  # the domain's default
    assert "KB_search" in default_tools and "grep" not in default_tools
    # The policy the agent gets is the configuration's too.
    assert grep.observation.metadata["policy"] != default.observation.metadata["policy"]


@pytest.mark.upstream
@pytest.mark.parametrize(
    ("domain", "config", "words"),
    [
        (DOMAIN, "nonsense", "Unknown retrieval configuration 'nonsense' for banking_knowledge"),
        (DOMAIN, "alltools", "OpenAI embeddings"),
        ("airline", "bm25", "airline has no retrieval configurations"),
    ],
)
async def test_reset_refuses_a_configuration_in_words(
    asgi_server, llm_server, server_token, domain, config, words
):
    banking_script(llm_server)
    async with Tau2Env(base_url=asgi_server.url) as env:
        with pytest.raises(RuntimeError, match=words):
            await env.reset(domain=domain, retrieval_config=config)
    assert llm_server.chat_requests() == []  # refused before the customer spoke


@pytest.mark.legacy_tau2
async def test_on_tau2_0_2_a_banking_reset_is_refused_in_words(
    asgi_server, llm_server, server_token
):
    async with Tau2Env(base_url=asgi_server.url) as env:
        with pytest.raises(RuntimeError, match="Unknown domain 'banking_knowledge'"):
            await env.reset(domain=DOMAIN, retrieval_config="bm25")
        with pytest.raises(RuntimeError, match="airline has no retrieval configurations"):
            await env.reset(domain="airline", retrieval_config="bm25")
    assert llm_server.chat_requests() == []


# --- TRL ------------------------------------------------------------------------------


@pytest.mark.upstream
def test_a_trl_class_per_configuration_has_its_tools_and_pickles_by_name():
    default = tau2_environment(domain=DOMAIN)
    grep = tau2_environment(domain=DOMAIN, retrieval_config="grep_only")

    assert default is tau2_environment(domain=DOMAIN, retrieval_config="bm25")
    assert default.retrieval_config == "bm25" and grep.retrieval_config == "grep_only"
    assert "KB_search" in _tool_names(default) and "grep" not in _tool_names(default)
    assert "grep" in _tool_names(grep) and "KB_search" not in _tool_names(grep)
    assert grep.__name__ == "Tau2BankingKnowledgeGrepOnlyEnv"
    assert pickle.loads(pickle.dumps(grep)) is grep  # noqa: S301 - our own bytes
    assert trl_environment.Tau2BankingKnowledgeEnv is default
    with pytest.raises(ValueError, match="OpenAI embeddings"):
        tau2_environment(domain=DOMAIN, retrieval_config="alltools")
    with pytest.raises(ValueError, match="Unknown retrieval configuration"):
        tau2_environment(domain=DOMAIN, retrieval_config="nonsense")


@pytest.mark.legacy_tau2
def test_on_tau2_0_2_there_is_no_banking_class_and_no_configuration_elsewhere():
    with pytest.raises(KeyError, match="Unknown domain 'banking_knowledge'"):
        tau2_environment(domain=DOMAIN, retrieval_config="bm25")
    with pytest.raises(ValueError, match="airline has no retrieval configurations"):
        tau2_environment(domain="airline", retrieval_config="bm25")


@pytest.mark.upstream
def test_a_trl_environment_plays_its_configuration_on_the_server(
    asgi_server, llm_server, alice, monkeypatch
):
    install()
    monkeypatch.setenv("TAU2_URL", asgi_server.url)
    monkeypatch.setenv("TAU2_API_KEY", api_key_create(user=alice, name="trl")[1])
    banking_script(llm_server)
    with tau2_environment(domain=DOMAIN, retrieval_config="grep_only")() as env:
        opening = env.reset(domain=DOMAIN, task_id=TASK, retrieval_config="grep_only")
        found = env.grep(pattern="Gold Rewards")
        with pytest.raises(ValueError, match="tau2_environment\\(domain='banking_knowledge'"):
            env.reset(domain=DOMAIN, task_id=TASK, retrieval_config="bm25")
        env.get_reward()
    assert opening and "Gold Rewards" in found
    (run,) = agent_runs_of(alice, count=1, final=True)
    assert run.retrieval_config == "grep_only"

"""banking_knowledge (τ² 1.x) in the engine: its retrieval configurations, and an episode
that sends what ``tau2 run --domain banking_knowledge --retrieval-config X`` sends and
ends with the same termination and ``reward_info``.

The scripted LLM plays task_001 (``tests.support.scripts.banking_script``).
"""

from __future__ import annotations

import itertools
import json
import re
import uuid

import pytest
from openenv.core.env_server.mcp_types import CallToolAction

import tests.support.llm_server as scripted_openai
from tau2_env.engine import catalog, submission
from tau2_env.engine.episodes import Episode
from tau2_env.llm import gateway
from tests.support.llm_server import ScriptedLLM
from tests.support.mcp_client import mcp_session
from tests.support.scripts import banking_agent_tools, banking_gold_script, banking_script
from tests.support.tau2_cli import tau2_cli_run

pytestmark = pytest.mark.upstream

DOMAIN = "banking_knowledge"
TASK = "task_001"
SEED = 300
MAX_STEPS = 20
ARGS = {"temperature": 0}
# τ²'s KB_search answers end with how long it took ("[retrieval=2ms, reranking=0ms,
# total=2ms]"): wall time, different in every play, so left out of the comparison.
_TIMINGS = re.compile(r"retrieval=\d+ms, reranking=\d+ms, total=\d+ms")
OFFLINE = ("no_knowledge", "full_kb", "golden_retrieval", "bm25", "grep_only", "bm25_grep")
EMBED = ("openai_embeddings", "openai_embeddings_grep", "qwen_embeddings", "qwen_embeddings_grep")


def _bodies(llm: ScriptedLLM) -> list[str]:
    return [_TIMINGS.sub("timings", json.dumps(r.body)) for r in llm.chat_requests()]


class _CountingUUIDs:
    """The scripted server's tool-call ids, counted from zero in each play."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._counter = itertools.count(1)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=next(self._counter))


def test_banking_knowledge_is_in_the_catalogue_with_its_97_tasks_and_bm25_by_default():
    assert DOMAIN in catalog.domain_names()
    assert DOMAIN not in catalog.skipped_domains()
    assert catalog.default_retrieval_config(DOMAIN) == "bm25"
    domain = catalog.get_domain(DOMAIN)
    assert len(domain.splits["base"]) == 97
    # The default's tools: bm25's knowledge-base search.
    assert "KB_search" in {t.name for t in domain.tools}


def test_the_offline_configurations_run_and_the_others_say_why_not():
    configs = {c.name: c.refusal for c in catalog.retrieval_configs(DOMAIN)}
    # Those that embed run with their embeddings on a connection (test_banking_embeddings).
    assert {name for name, why in configs.items() if why is None} == set(OFFLINE) | set(EMBED)
    assert "OpenAI embeddings" in configs["alltools"]
    assert "shell sandbox" in configs["alltools"]
    assert "OpenRouter embeddings" in configs["qwen_embeddings_reranker"]
    assert "LLM reranker" in configs["bm25_reranker"]
    assert "shell sandbox" in configs["terminal_use"]
    assert catalog.retrieval_configs("airline") == ()


def test_an_episode_refuses_a_configuration_this_server_cannot_run(llm_server):
    route = gateway.hf_route(model="org/customer", token="hf_not_a_token_0001")
    with pytest.raises(ValueError, match="OpenAI embeddings"):
        Episode(domain=DOMAIN, task_id=TASK, user_llm=route, retrieval_config="alltools")
    with pytest.raises(ValueError, match="no retrieval configurations"):
        Episode(domain="airline", task_id="27", user_llm=route, retrieval_config="bm25")
    with pytest.raises(ValueError, match="Unknown retrieval configuration"):
        Episode(domain=DOMAIN, task_id=TASK, user_llm=route, retrieval_config="nonsense")


# The second task's expected actions are all the agent's writes (log the verification,
# unlock a discoverable tool, order the replacement card with it), scored on the database.
WRITES_TASK = "task_036"
PARITY = [(TASK, config) for config in OFFLINE] + [
    (WRITES_TASK, "bm25"),
    (WRITES_TASK, "grep_only"),
]


def _agent_calls(task_id: str) -> list[tuple[str, dict]]:
    actions = catalog.get_task(DOMAIN, task_id).expected_actions
    assert {a["requestor"] for a in actions} == {"assistant"}
    return [(a["name"], a["arguments"]) for a in actions]


@pytest.mark.slow
@pytest.mark.parametrize(("task_id", "retrieval_config"), PARITY)
def test_an_episode_sends_what_tau2_run_sends_and_scores_the_same(
    llm_server, monkeypatch, tmp_path, task_id, retrieval_config
):
    ids = _CountingUUIDs()
    monkeypatch.setattr(scripted_openai, "uuid", ids)
    if task_id == TASK:
        banking_script(llm_server)
    else:
        banking_gold_script(llm_server, calls=_agent_calls(task_id))
    results = tau2_cli_run(
        tmp_path,
        domain=DOMAIN,
        task_ids=[task_id],
        seed=SEED,
        max_steps=MAX_STEPS,
        agent_llm="openai/scripted-agent",
        user_llm="openai/scripted-customer",
        agent_args={**ARGS, "api_base": llm_server.base_url},
        user_args={**ARGS, "api_base": llm_server.base_url},
        retrieval_config=retrieval_config,
    )
    written = json.loads(results.read_text())
    (simulation,) = written["simulations"]
    # What the product's results files record of the configuration, as tau2 run does.
    assert written["info"]["retrieval_config"] == retrieval_config
    assert written["info"]["environment_info"]["policy"] == catalog.results_policy(
        DOMAIN, retrieval_config
    )
    # A submission's banking results carry it, as τ²'s prepare_submission copies it.
    scores = submission.domain_scores(submission.trajectories_read(results.read_text()))
    assert scores.results().retrieval_config == retrieval_config
    cli = _bodies(llm_server)

    llm_server.requests.clear()
    ids.restart()

    def route(model: str) -> gateway.Route:
        return gateway.Route(
            provider="openai_compatible",
            model=model,
            base_url=llm_server.base_url,
            api_key="sk-scripted-not-a-key",
        )

    episode = Episode(
        domain=DOMAIN,
        task_id=task_id,
        user_llm=route("scripted-customer"),
        agent_llm=route("scripted-agent"),
        agent_llm_args=dict(ARGS),
        user_llm_args=dict(ARGS),
        seed=simulation["seed"],
        max_steps=MAX_STEPS,
        retrieval_config=retrieval_config,
    )
    assert episode.run() == "ended", episode.error
    ours = _bodies(llm_server)

    assert len(ours) == len(cli)
    for index, (theirs, mine) in enumerate(zip(cli, ours, strict=True)):
        assert mine == theirs, f"request {index} differs"
    assert episode.termination_reason.value == simulation["termination_reason"]
    assert episode.reward_info.model_dump(mode="json") == simulation["reward_info"]
    assert simulation["reward_info"]["reward"] == 1.0
    # The agent's knowledge tool was called (where the configuration has one).
    agent_calls = [
        call["name"] for m in simulation["messages"] for call in m.get("tool_calls") or []
    ]
    expected = {"bm25": "KB_search", "grep_only": "grep"}.get(retrieval_config)
    assert expected is None or expected in agent_calls
    if task_id == WRITES_TASK:  # the agent's own writes, matched on the database
        assert simulation["reward_info"]["db_check"]["db_match"] is True
        assert [c for c in agent_calls if c not in ("KB_search", "grep")] == [
            name for name, _ in _agent_calls(task_id)
        ]


async def test_an_openenv_agent_searches_the_knowledge_base_and_solves_task_001(
    asgi_server, llm_server, monkeypatch
):
    """The OpenEnv face on banking_knowledge: the agent's tools are the default
    configuration's (bm25's KB_search), and the episode scores as τ² does."""
    from tau2_env import Tau2Env

    monkeypatch.setenv("HF_TOKEN", "hf_server_token_0000000000")
    banking_script(llm_server)
    async with Tau2Env(base_url=asgi_server.url) as env:
        opened = await env.reset(domain=DOMAIN, task_id=TASK)
        tools = {t.name for t in await env.list_tools(use_cache=False)}
        found = await env.call_tool("KB_search", query="gold rewards card cash back")
        reply = await env.call_tool(
            "respond_to_user", message="The Gold Rewards Card suits you: no annual fee."
        )
        ended = await env.step(CallToolAction(tool_name="done", arguments={}))

    assert opened.observation.metadata["domain"] == DOMAIN
    assert {"KB_search", "respond_to_user", "done"} <= tools and "grep" not in tools
    assert "Gold Rewards" in found
    assert "###STOP###" in reply
    assert ended.done is True and ended.reward == 1.0


VISITOR_TOKEN = "hf_visitor_token_banking_3333333"


@pytest.mark.parametrize(
    ("retrieval_config", "search"),
    [
        ("bm25", ("KB_search", {"query": "gold rewards card cash back"})),
        ("grep_only", ("grep", {"pattern": "Gold Rewards Card"})),
    ],
)
async def test_an_mcp_client_plays_task_001_with_the_tools_of_its_retrieval_config(
    asgi_server, llm_server, retrieval_config, search
):
    """The MCP face on banking_knowledge, through the official SDK's client: the URL's
    retrieval configuration decides the agent's knowledge tool (bm25's KB_search,
    grep_only's grep, never the other's), and the episode scores 1.0."""
    banking_script(llm_server)
    name, arguments = search
    other = {"KB_search": "grep", "grep": "KB_search"}[name]
    url = (
        f"{asgi_server.url}/agent/mcp?domain={DOMAIN}&task_id={TASK}"
        f"&retrieval_config={retrieval_config}"
    )
    async with mcp_session(url, token=VISITOR_TOKEN) as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        started = await session.call_tool("start", {})
        wrong = await session.call_tool(other, {"query": "x", "pattern": "x"})
        found = await session.call_tool(name, arguments)
        reply = await session.call_tool(
            "respond_to_user", {"message": "The Gold Rewards Card suits you: no annual fee."}
        )

    assert {name, "start", "respond_to_user", "done"} <= tools and other not in tools
    assert started.isError is False
    assert started.structuredContent["retrieval_config"] == retrieval_config
    assert wrong.isError is True  # the other configuration's tool is not this episode's
    assert found.isError is False and "Gold Rewards" in found.content[0].text
    final = reply.structuredContent
    assert final["done"] is True and final["termination_reason"] == "user_stop"
    assert final["reward"] == 1.0 and final["reward_info"]["reward"] == 1.0
    # The MCP client was the agent: the scripted LLM played only the customer.
    assert not banking_agent_tools(llm_server)


async def test_an_mcp_start_refuses_a_configuration_this_server_cannot_run(asgi_server, llm_server):
    url = f"{asgi_server.url}/agent/mcp?domain={DOMAIN}&task_id={TASK}"
    async with mcp_session(url, token=VISITOR_TOKEN) as session:
        refused = await session.call_tool("start", {"retrieval_config": "alltools"})

    assert refused.isError is True
    assert "alltools needs OpenAI embeddings" in refused.content[0].text
    assert not llm_server.chat_requests()  # refused before the customer spoke

"""banking_knowledge's embedding retrieval configurations (τ² 1.x) through a connection:
the knowledge base and the agent's searches are embedded on the episode's embedder route
(the connection's base URL and key, never the server's OPENAI_API_KEY), counted as the
embedder's tokens, cached per connection model, and a failing endpoint ends the episode
saying why.

The scripted server embeds (``POST /v1/embeddings``) and plays task_001
(``tests.support.scripts.banking_script``).
"""

from __future__ import annotations

import json

import pytest

from tau2_env.engine import catalog
from tau2_env.engine.episodes import Episode
from tau2_env.llm import embeddings, gateway
from tests.support.llm_server import ScriptedLLM, error
from tests.support.scripts import banking_script
from tests.support.tau2_cli import tau2_cli_run

pytestmark = pytest.mark.upstream

DOMAIN = "banking_knowledge"
TASK = "task_001"
CONFIG = "openai_embeddings"
EMBEDDING_KEY = "sk-embeddings-connection-key-0001"
CHAT_KEY = "sk-chat-connection-key-00000002"
QUERY = "credit card cash back annual fee"  # the scripted agent's search


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TAU2_EMBEDDINGS_CACHE_DIR", str(tmp_path / "embeddings"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return tmp_path / "embeddings"


def _route(llm: ScriptedLLM, model: str, *, key: str = CHAT_KEY, origin: str = "") -> gateway.Route:
    return gateway.Route(
        provider="openai_compatible",
        model=model,
        base_url=llm.base_url,
        api_key=key,
        label="Team endpoint",
        origin=origin or f"@team/{model}",
    )


def _episode(llm: ScriptedLLM, *, embedder: gateway.Route | None, config: str = CONFIG) -> Episode:
    return Episode(
        domain=DOMAIN,
        task_id=TASK,
        user_llm=_route(llm, "scripted-customer"),
        agent_llm=_route(llm, "scripted-agent"),
        agent_llm_args={"temperature": 0},
        user_llm_args={"temperature": 0},
        seed=300,
        max_steps=20,
        retrieval_config=config,
        embedding_llm=embedder,
    )


def test_the_embedding_configurations_run_with_a_connection_and_the_others_say_why_not():
    configs = {c.name: c for c in catalog.retrieval_configs(DOMAIN)}
    for name in ("openai_embeddings", "openai_embeddings_grep"):
        assert configs[name].available and configs[name].embedder == "text-embedding-3-large"
    for name in ("qwen_embeddings", "qwen_embeddings_grep"):
        assert configs[name].available and configs[name].embedder == "qwen3-embedding-8b"
    assert not configs["bm25"].embeds
    assert "reranker" in configs["openai_embeddings_reranker"].refusal
    assert "shell sandbox" in configs["alltools"].refusal
    assert "shell sandbox" in configs["terminal_use"].refusal
    # Without a connection model for its embeddings, it says what to choose.
    refusal = catalog.retrieval_refusal(domain=DOMAIN, retrieval_config=CONFIG, embeddings=False)
    assert "choose an embeddings model on one of your connections" in refusal
    assert (
        catalog.retrieval_refusal(domain=DOMAIN, retrieval_config=CONFIG, embeddings=True) is None
    )
    assert "embeds nothing" in catalog.retrieval_refusal(
        domain=DOMAIN, retrieval_config="bm25", embeddings=True
    )


def test_an_episode_without_an_embedder_is_refused_before_anything_is_sent(llm_server, cache_dir):
    with pytest.raises(ValueError, match="choose an embeddings model"):
        _episode(llm_server, embedder=None)
    assert not llm_server.requests


def test_an_episode_embeds_on_its_connection_and_counts_the_tokens(llm_server, cache_dir):
    banking_script(llm_server)
    embedder = _route(llm_server, "team-embed-large", key=EMBEDDING_KEY)
    episode = _episode(llm_server, embedder=embedder)
    indexed = llm_server.embedding_requests()
    assert len(indexed) == 1  # the whole knowledge base, in one request, as τ² sends it
    assert len(indexed[0].body["input"]) == len(catalog.documents(DOMAIN))
    assert indexed[0].body["model"] == "team-embed-large"
    kb_tokens = episode.embedding_usage.prompt_tokens
    assert kb_tokens > 10_000

    assert episode.run() == "ended", episode.error
    assert episode.reward == 1.0
    sent = llm_server.embedding_requests()
    assert {r.token for r in sent} == {EMBEDDING_KEY}  # never the chat key, never the server's
    assert {r.token for r in llm_server.chat_requests()} == {CHAT_KEY}
    searched = [r.body["input"] for r in sent[1:]]
    assert [QUERY] in searched  # the agent's KB_search
    assert episode.embedding_usage.prompt_tokens == kb_tokens + QUERY.count(" ") + 1
    # The knowledge base's embeddings are kept for this connection model only.
    assert (cache_dir / embeddings.scope(embedder)).is_dir()

    # A second episode on the same connection model pays for nothing of the knowledge base.
    llm_server.requests.clear()
    again = _episode(llm_server, embedder=embedder)
    assert llm_server.embedding_requests() == []
    assert again.embedding_usage.prompt_tokens == 0

    # Another connection serving a model of the same name embeds (and pays) on its own.
    other = _route(
        llm_server,
        "team-embed-large",
        key="sk-other-team-key-000003",
        origin="@bob/team-embed-large",
    )
    third = _episode(llm_server, embedder=other)
    assert [r.token for r in llm_server.embedding_requests()] == ["sk-other-team-key-000003"]
    assert third.embedding_usage.prompt_tokens == kb_tokens


def test_an_unreachable_embeddings_endpoint_ends_the_episode_saying_why(llm_server, cache_dir):
    banking_script(llm_server)
    dead = gateway.Route(
        provider="openai_compatible",
        model="team-embed-large",
        base_url="http://127.0.0.1:9/v1",
        api_key=EMBEDDING_KEY,
        label="Dead endpoint",
        origin="@dead/team-embed-large",
    )
    with pytest.raises(embeddings.EmbeddingsError) as raised:
        _episode(llm_server, embedder=dead)
    message = str(raised.value)
    assert "Dead endpoint" in message and "refused the connection" in message
    assert EMBEDDING_KEY not in message


def test_a_search_whose_embeddings_fail_ends_the_run_with_the_reason(llm_server, cache_dir):
    banking_script(llm_server)
    # A connection model of its own: no query of it is cached yet.
    embedder = _route(llm_server, "team-embed-small", key=EMBEDDING_KEY)
    episode = _episode(llm_server, embedder=embedder)  # the knowledge base is embedded
    llm_server.embeddings_reply = error(401, "Incorrect API key provided")
    assert episode.run() == "failed"
    assert episode.error.startswith("The knowledge base's embeddings failed: Embeddings on")
    assert "Team endpoint" in episode.error and EMBEDDING_KEY not in episode.error


def test_a_qwen_configuration_sends_what_tau2s_openrouter_embedder_sends(llm_server, cache_dir):
    """τ²'s own OpenRouter embedder's texts (Qwen's query instruction on searches, none on
    documents) and ``encoding_format``, with the connection's model and key."""
    banking_script(llm_server)
    embedder = _route(llm_server, "qwen/qwen3-embedding-8b", key=EMBEDDING_KEY)
    episode = _episode(llm_server, embedder=embedder, config="qwen_embeddings")
    assert episode.run() == "ended", episode.error
    assert episode.reward == 1.0

    documents, *searches = llm_server.embedding_requests()
    assert documents.body["encoding_format"] == "float"
    assert not documents.body["input"][0].startswith("Instruct:")
    assert searches[0].body["input"] == [
        "Instruct: Given a web search query, retrieve relevant passages that answer the "
        f"query\nQuery:{QUERY}"
    ]
    assert {r.token for r in llm_server.embedding_requests()} == {EMBEDDING_KEY}


def test_an_endpoint_that_answers_no_embeddings_fails_a_qwen_search_saying_why(
    llm_server, cache_dir
):
    banking_script(llm_server)
    embedder = _route(llm_server, "qwen-embed-unknown", key=EMBEDDING_KEY)
    llm_server.embeddings_reply = error(404, "The model does not exist")
    with pytest.raises(embeddings.EmbeddingsError, match="Embeddings on Team endpoint"):
        _episode(llm_server, embedder=embedder, config="qwen_embeddings")


def test_an_episode_embeds_what_tau2_run_embeds(llm_server, cache_dir, tmp_path):
    """`tau2 run --retrieval-config openai_embeddings`, its OpenAI embedder pointed at the
    scripted server, and an episode whose connection serves τ²'s own embeddings model send
    the same embeddings requests, in order: the knowledge base, then each search."""
    banking_script(llm_server)
    tau2_model = "text-embedding-3-large"  # what τ²'s openai_embeddings asks for
    cli_dir = tmp_path / "cli"
    cli_dir.mkdir()
    results = tau2_cli_run(
        cli_dir,
        domain=DOMAIN,
        task_ids=[TASK],
        seed=300,
        max_steps=20,
        agent_llm="openai/scripted-agent",
        user_llm="openai/scripted-customer",
        agent_args={"temperature": 0, "api_base": llm_server.base_url},
        user_args={"temperature": 0, "api_base": llm_server.base_url},
        retrieval_config=CONFIG,
        key=EMBEDDING_KEY,
        env={"OPENAI_BASE_URL": llm_server.base_url},
    )
    (simulation,) = json.loads(results.read_text())["simulations"]
    cli = [r.body for r in llm_server.embedding_requests()]
    # The knowledge base in one request, then the scripted search, all on τ²'s model.
    assert len(cli[0]["input"]) == len(catalog.documents(DOMAIN))
    assert [QUERY] in [body["input"] for body in cli[1:]]
    assert {body["model"] for body in cli} == {tau2_model}

    llm_server.requests.clear()
    banking_script(llm_server)
    episode = _episode(llm_server, embedder=_route(llm_server, tau2_model, key=EMBEDDING_KEY))
    assert episode.run() == "ended", episode.error
    ours = [r.body for r in llm_server.embedding_requests()]
    assert ours == cli
    assert episode.reward == simulation["reward_info"]["reward"] == 1.0

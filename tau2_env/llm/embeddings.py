"""banking_knowledge's embeddings, sent along the conversation's embedder route.

τ² 1.x's embedding retrieval configurations (``openai_embeddings``, ``qwen_embeddings``,
their ``_grep`` variants) embed the knowledge base when the environment is built and
each ``KB_search`` query when the agent searches, with an embedder τ²'s pipeline builds
from its public registry (``EMBEDDER_REGISTRY[embedder_type](**embedder_params)``, in
``tau2.knowledge.document_preprocessors.embedding_indexer`` and
``…input_preprocessors.embedding_encoder``). Its own embedders call
``OpenAI(api_key=os.getenv("OPENAI_API_KEY"))`` (OpenRouter's likewise): the server's key,
for everyone. :func:`install` (called by ``tau2_env.llm.compat.install``) puts
:class:`RoutedOpenAIEmbedder` and :class:`RoutedOpenRouterEmbedder` in those registries:
τ²'s own classes — the same texts, Qwen's query instruction, ``encoding_format`` —
whose client is the current conversation's embedder route
(``gateway.conversation(embedder=…)``, a connection's model, its key and base URL):

* the request is ``POST <base URL>/embeddings`` with the route's key, through the
  outbound policy's client (SSRF guard, a deadline of the route's timeout, a size cap of
  :data:`MAX_REPLY_BYTES`), with the route's model in place of τ²'s model name;
* its ``usage.prompt_tokens`` are counted on the open meters as role ``embedder``
  (``gateway.count_usage``): the run prices and budgets them;
* made outside a conversation with an embedder route, it is refused: never the server's
  ``OPENAI_API_KEY`` (no environment variable is read or set);
* a failure is a :class:`~tau2_env.llm.gateway.LLMCallError` saying what went wrong, in
  the Connections page's words, never with the key.

**Caches, per connection model.** τ²'s pipeline keeps the knowledge base's embeddings on
disk (``EmbeddingsCache``, by default under the working directory) keyed by embedder type
and τ²'s model name only, and query embeddings in memory keyed the same way: two
connections serving "text-embedding-3-large" would share vectors, one paying for the
other. Here both are scoped to the route's connection model (:func:`scope`: its
``@connection/model``, base URL and model): the knowledge base's embeddings of a
connection model are computed once, by the first run on it (whose cost counts them), and
kept under ``TAU2_EMBEDDINGS_CACHE_DIR/<scope>/`` (:func:`cache_root`) for every later run
on the same connection model on that machine; queries are kept in the worker's memory
the same way. No vector computed on one connection serves another.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openai

from tau2_env import config
from tau2_env.llm import gateway, outbound

__all__ = [
    "EMBEDDING_PROVIDERS",
    "MAX_REPLY_BYTES",
    "EmbeddingsError",
    "cache_root",
    "failures",
    "install",
    "listing",
    "scope",
]

# The kinds of connection that serve OpenAI's embeddings API (``POST /embeddings``).
EMBEDDING_PROVIDERS = frozenset(
    {"openai", "openai_compatible", "openrouter", "together", "fireworks", "mistral"}
)
# An embeddings answer for the whole knowledge base (698 documents × 3,072-4,096 floats,
# as JSON text) is tens of MiB, not a chat completion's few KiB.
MAX_REPLY_BYTES = 256 * 1024 * 1024
# The OpenAI SDK's own retries of a failed request (408/409/429/5xx, a lost connection;
# never 401/402/403/404), as τ²'s embedders' default clients make them.
SDK_RETRIES = 2
# Handed to τ²'s embedders' constructors, which build an OpenAI client of their own that
# is never used (it would read the server's OPENAI_API_KEY without one).
_UNUSED_KEY = "unused-the-conversation-route-has-the-key"

_INDEXER = "tau2.knowledge.document_preprocessors.embedding_indexer"
_ENCODER = "tau2.knowledge.input_preprocessors.embedding_encoder"


class EmbeddingsError(gateway.LLMCallError):
    """An embeddings call failed; ``str()`` says why, with no secret in it."""


_failures: contextvars.ContextVar[list[EmbeddingsError] | None] = contextvars.ContextVar(
    "tau2_embedding_failures", default=None
)


@contextmanager
def failures() -> Iterator[list[EmbeddingsError]]:
    """Within the block, every embeddings call that failed is added to the list it
    yields — also those τ² caught: a failed search is a tool error to τ², which the
    conversation would otherwise go on past."""
    found: list[EmbeddingsError] = []
    outer = _failures.get()
    token = _failures.set(found)
    try:
        yield found
    finally:
        _failures.reset(token)
        if outer is not None:
            outer.extend(found)  # an enclosing block hears of them too


_listing: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "tau2_embeddings_listing", default=False
)


@contextmanager
def listing() -> Iterator[None]:
    """Within the block, an environment is built only to read its tools and its policy
    (the catalogue's): nothing is embedded or sent, every vector is a zero, and no cache
    is read or written. Never for a conversation: its searches would find nothing."""
    token = _listing.set(True)
    try:
        yield
    finally:
        _listing.reset(token)


class _NoCache:
    """τ²'s ``EmbeddingsCache`` while :func:`listing`: never read, never written."""

    def get(self, *args: Any, **kwargs: Any) -> None:
        return None

    def put(self, *args: Any, **kwargs: Any) -> None:
        return None


def _zeros(kwargs: dict[str, Any]) -> Any:
    inputs = kwargs.get("input")
    count = 1 if isinstance(inputs, str) else len(inputs or ())
    return SimpleNamespace(data=[SimpleNamespace(embedding=[0.0]) for _ in range(count)])


def _failed(error: EmbeddingsError) -> EmbeddingsError:
    found = _failures.get()
    if found is not None:
        found.append(error)
    return error


def cache_root() -> Path:
    """Where the knowledge base's embeddings are kept, one folder per connection model
    (``TAU2_EMBEDDINGS_CACHE_DIR``)."""
    return config.embeddings_cache_dir()


def _route() -> gateway.Route:
    route = gateway.current_route(gateway.ROLE_EMBEDDER)
    if route is None:
        raise gateway.MissingCredentialsError(
            "This retrieval configuration embeds with a connection, and none was given for "
            "its embeddings: refused rather than using the server's OPENAI_API_KEY. Choose "
            "an embeddings model on a connection for it."
        )
    return route


def scope(route: gateway.Route) -> str:
    """The cache scope of ``route``'s embeddings: one per connection model and endpoint
    (16 hex digits of a sha256; the key is not part of it, so a rotated key keeps them)."""
    name = f"{route.origin or route.label or route.provider}|{route.base_url}|{route.model}"
    return hashlib.sha256(name.encode()).hexdigest()[:16]


def _base_url(route: gateway.Route) -> str:
    if route.base_url:
        return route.base_url
    # The OpenAI SDK would read OPENAI_BASE_URL from the environment without one.
    raise _failed(
        EmbeddingsError(
            f"Embeddings on {route.describe()} have no endpoint: the connection needs a base URL",
            kind="bad_request",
        )
    )


def _create(kwargs: dict[str, Any]) -> Any:
    """``embeddings.create(**kwargs)`` along the current embedder route (see the module)."""
    if _listing.get():
        return _zeros(kwargs)
    route = _route()
    gateway.redact_in_logs(route)
    client = openai.OpenAI(
        api_key=route.api_key,
        base_url=_base_url(route),
        # The SDK takes an httpx client as well as its own httpx2 one (it checks both).
        http_client=outbound.client(),  # type: ignore[arg-type]
        max_retries=SDK_RETRIES,
        timeout=route.timeout,
        default_headers=dict(route.extra_headers) or None,
    )
    call = {**kwargs, "model": route.model}
    try:
        with outbound.bounded(route.timeout * (SDK_RETRIES + 1), max_bytes=MAX_REPLY_BYTES):
            response = client.embeddings.create(**call)
    except Exception as exc:
        kind, message = gateway.explain_error(exc, route=route)
        raise _failed(
            EmbeddingsError(
                f"Embeddings on {route.describe()} failed: {message}",
                status_code=getattr(exc, "status_code", None),
                transient=gateway.is_transient(exc),
                kind=kind,
            )
        ) from None
    if not getattr(response, "data", None):
        raise _failed(
            EmbeddingsError(
                f"Embeddings on {route.describe()} failed: the endpoint answered without "
                "embeddings; it must serve OpenAI's embeddings API (POST /embeddings)",
                kind="bad_reply",
            )
        )
    gateway.count_usage(gateway.ROLE_EMBEDDER, response)
    return response


class _Embeddings:
    def create(self, **kwargs: Any) -> Any:
        return _create(kwargs)


class _RoutedClient:
    """What τ²'s embedders call (``self.client.embeddings.create``)."""

    embeddings = _Embeddings()


class _Routed:
    """τ²'s embedder with the conversation's route as its client."""

    @property
    def client(self) -> _RoutedClient:
        return _RoutedClient()

    @client.setter
    def client(self, value: Any) -> None:
        pass  # τ²'s own client (the server's environment key) is never kept


def _embedder_classes() -> dict[str, type]:
    embedders: Any = importlib.import_module("tau2.knowledge.embedders")

    class RoutedOpenAIEmbedder(_Routed, embedders.OpenAIEmbedder):
        def __init__(self, model: str = "text-embedding-ada-002", api_key: Any = None) -> None:
            super().__init__(model=model, api_key=_UNUSED_KEY)

    class RoutedOpenRouterEmbedder(_Routed, embedders.OpenRouterEmbedder):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["api_key"] = _UNUSED_KEY
            super().__init__(*args, **kwargs)

        def embed(self, texts: list[str], max_retries: int = 3) -> Any:
            # τ²'s OpenRouter embedder tries again (1, 2, 4 s) on a message that says
            # "json" and then raises its own RuntimeError: the call's own retries are the
            # SDK's, and its failure is raised as it is, saying why.
            with failures() as failed:
                try:
                    return super().embed(texts, max_retries=1)
                except Exception:
                    if failed:
                        raise failed[0] from None
                    raise

    return {"openai": RoutedOpenAIEmbedder, "openrouter": RoutedOpenRouterEmbedder}


_caches: dict[tuple[Path, str], Any] = {}
_caches_lock = threading.Lock()


def _embeddings_cache() -> Any:
    """τ²'s ``EmbeddingsCache`` of the current route's connection model."""
    if _listing.get():
        return _NoCache()
    key = (cache_root(), scope(_route()))
    with _caches_lock:
        if key not in _caches:
            cache_module = importlib.import_module("tau2.knowledge.embeddings_cache")
            _caches[key] = cache_module.EmbeddingsCache(cache_dir=str(key[0] / key[1]))
        return _caches[key]


def _scoped(embedder_config: dict[str, Any] | None) -> dict[str, Any]:
    return {**(embedder_config or {}), "_connection_model": scope(_route())}


_installed: list[bool] = []


def install() -> None:
    """Route τ² 1.x's embeddings (see the module); idempotent. Nothing on τ² 0.2, which
    has no knowledge domain."""
    if _installed:
        return
    indexer: Any = importlib.import_module(_INDEXER)
    encoder: Any = importlib.import_module(_ENCODER)
    cache_module: Any = importlib.import_module("tau2.knowledge.embeddings_cache")
    classes = _embedder_classes()
    for module in (indexer, encoder):
        module.EMBEDDER_REGISTRY.update(classes)
    # τ²'s indexer reads its disk cache through this module-level name.
    indexer.get_embeddings_cache = _embeddings_cache
    get_cached, put_cached = (
        cache_module.get_cached_query_embedding,
        cache_module.cache_query_embedding,
    )

    def get_cached_query_embedding(query, embedder_type, embedder_config=None):
        if _listing.get():
            return None
        return get_cached(query, embedder_type, _scoped(embedder_config))

    def cache_query_embedding(query, embedding, embedder_type, embedder_config=None):
        if not _listing.get():
            put_cached(query, embedding, embedder_type, _scoped(embedder_config))

    encoder.get_cached_query_embedding = get_cached_query_embedding
    encoder.cache_query_embedding = cache_query_embedding
    _installed.append(True)

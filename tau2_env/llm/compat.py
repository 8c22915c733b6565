"""Every use of a library's private internals, in one module, for tested versions only.

tau2_env builds on four libraries whose public APIs leave a few things out. Wherever it
relies on their internals it does so here, and only with the versions in :data:`TESTED`:
on any other, :func:`require` raises :class:`UntestedVersion`, naming the library, the
version found and the version tested (a private name can change in any release).

Process-wide overrides, applied by :func:`install` (explicit, idempotent; called by the
Episode, the OpenEnv and MCP faces, and by the web project at start-up):

* τ² ``tau2.utils.llm_utils.completion`` (the global τ²'s ``generate`` calls litellm
  through) becomes :func:`tau2_env.llm.gateway.routed_completion`: every LLM call τ² makes —
  the customer, τ²'s agent, the NL judge — goes along the current conversation's route,
  and one made outside a conversation fails instead of using the server's keys.
* τ² 1.x's embedders (``EMBEDDER_REGISTRY`` of its knowledge indexer and query encoder)
  and their caches (``get_embeddings_cache``, ``get_cached_query_embedding``,
  ``cache_query_embedding`` as those modules hold them) become
  :mod:`tau2_env.llm.embeddings`'s: banking_knowledge's embeddings go along the
  conversation's embedder route, cached per connection model.
* τ² ``Tool.openai_schema`` is built once per tool content, each caller getting a copy of
  exactly what τ² built (it rebuilt the pydantic JSON schema at every LLM call), and τ²
  ``Tool.parse_data`` once per function signature and docstring, so the tools of the next
  episode's environment share the first one's pydantic models (τ² parsed every tool's
  docstring and built two models for it with each environment).
* τ² ``Registry._domains``: each domain's constructor gets a dispatcher that asks the
  builders registered with :func:`tau2_environments_from` first. τ²'s evaluator builds
  its two environments per score through the registry and offers no other hook.
* litellm's module-wide response cache is switched off: its key may ignore ``api_key``,
  so one visitor could be served another's answer.
* litellm's price-list lookups (``utils.get_model_info_helper``, failures included, and
  the fallback rules' ``match_capabilities``) are remembered until the price list or the
  rules change, so is τ²'s ``completion_cost`` failing for a model the price list lacks
  (:class:`_UnpricedModels`), and up to :data:`CLIENTS_KEPT` of its per-key clients are kept instead
  of 200: less CPU per call, the same requests (``tests/tau2_env/test_llm_request.py``).
* tau2_env's LLM calls (``tau2_env.llm.gateway.use_sender``) go by :class:`DirectPath` where it
  may: litellm's own request for each kind of call is seen once (by the outbound
  transport's observer), and later ones are sent as those bytes
  without litellm, their answers read with litellm's and the OpenAI SDK's own functions
  (``convert_to_model_response_object``, ``construct_type``); a failed one is handed
  back to litellm's transport as it came.

Subclasses overriding private methods, for the faces that need them (built by
:func:`openenv_server_class` and :func:`mcp_session_manager_class`; their libraries are
imported only then — openenv's package imports gradio, seconds and ~50 MB that Celery
workers and ``manage.py`` have no use for):

* openenv ``HTTPEnvServer._create_session`` / ``_cleanup_session_resources`` /
  ``_update_session_activity`` (and its ``_session_lock`` and
  ``_session_websocket_attachments``), told to :class:`OpenEnvSessionHooks`;
* MCP SDK ``StreamableHTTPSessionManager._admit_session`` / ``_discard_session`` (and
  its ``_server_instances``), told to two callbacks.

And openenv's wire shape of a refused session, which :func:`with_capacity_details`
recognises to add when to retry.

To move a library to a new version: check each of its hooks here against the new code,
run ``tests/tau2_env/test_compat.py`` (and the faces' tests), then add it to TESTED.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import http.client
import json
import logging
import os
import pickle
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import cachetools

# isort: off
# τ² (and litellm) only through tau2_env.llm._tau2 first: quiet import, local price list.
from tau2_env.llm._tau2 import registry
import httpx
import litellm
import openai._models as openai_models
import openai.types.chat as openai_chat
import tau2.utils.llm_utils as tau2_llm_utils
from litellm import utils as litellm_utils
from litellm.litellm_core_utils.llm_response_utils import convert_dict_to_response
from litellm.llms.openai import common_utils as openai_common
from tau2.environment.tool import Tool

try:  # litellm 1.110's fallback rules; absent in 1.82.6 (τ² 1.x's), whose lookups go unkept
    from litellm.litellm_core_utils import fallback_generalizations
except ImportError:
    fallback_generalizations = None

# isort: on
from tau2_env import config, versions
from tau2_env.generations import tau2_generation
from tau2_env.llm import embeddings, gateway, outbound, wire
from tau2_env.versions import TESTED, UntestedVersion, installed_version, require

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from openenv.core.env_server.http_server import HTTPEnvServer

__all__ = [
    "DIRECT",
    "TESTED",
    "DirectPath",
    "EnvironmentBuilder",
    "OpenEnvSessionHooks",
    "UntestedVersion",
    "install",
    "installed_version",
    "mcp_session_manager_class",
    "openenv_server_class",
    "require",
    "tau2_constructor",
    "tau2_environments_from",
    "tau2_openai_schema",
    "with_capacity_details",
]

log = logging.getLogger(__name__)

_installed = False
_install_lock = threading.Lock()


def install() -> None:
    """Check every library's version, then apply the process-wide overrides (see the
    module docstring). Idempotent and thread-safe; raises :class:`UntestedVersion`
    before changing anything if a library is not a tested version."""
    global _installed
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        versions.require_all()
        _route_tau2_llm_calls()
        _route_tau2_embeddings()
        _cache_tool_schemas()
        _share_tool_models()
        _dispatch_tau2_environments()
        _litellm_cache_off()
        _keep_litellm_lookups()
        _keep_unpriced_models()
        _keep_more_clients()
        _watch_litellm_requests()
        _send_direct()
        _installed = True


# --------------------------------------------------------- τ²: its LLM calls


def _route_tau2_llm_calls() -> None:
    # τ² 26.3's generate() calls ``completion(...)``, imported into its module from
    # litellm: replacing that global routes every τ² call and nothing else.
    tau2_llm_utils.completion = gateway.routed_completion


def _route_tau2_embeddings() -> None:
    # τ² 1.x's knowledge pipeline builds its embedders from the public
    # ``EMBEDDER_REGISTRY`` of its indexer and its query encoder, and reads its caches
    # through module-level names there: tau2_env.llm.embeddings says what it puts there.
    # τ² 0.2 has no knowledge domain.
    if tau2_generation() != "0.2":
        embeddings.install()


# ------------------------------------------------------- τ²: tool schemas

# τ²'s own property, whether or not it has been replaced yet.
_TAU2_OPENAI_SCHEMA: Callable[[Tool], dict] = getattr(
    Tool.openai_schema.fget, "__tau2_original__", Tool.openai_schema.fget
)


def tau2_openai_schema(tool: Tool) -> dict:
    """τ²'s own ``Tool.openai_schema`` of ``tool``, built afresh (as τ² builds it)."""
    return _TAU2_OPENAI_SCHEMA(tool)


def _cache_tool_schemas() -> None:
    """τ²'s ``Tool.openai_schema`` builds its parameters' JSON schema (pydantic's
    ``model_json_schema()``) again at every LLM call, for every tool: telecom's customer
    has 30 phone tools, ~0.3 ms each, at each of their turns. Here τ²'s own property runs
    once per tool *content* — its class, name, descriptions and parameters model, all
    that τ² builds the schema from — so a tool rebuilt with the next episode's
    environment (same function, same parameters model: :func:`_share_tool_models`) finds
    it built; each caller gets its own copy of that result (unpickled: the same dict τ²
    would have built, about 4× cheaper than a deep copy). The last 4,096 tools are remembered
    (a few hundred KB).
    """
    if getattr(Tool.openai_schema.fget, "__tau2_original__", None) is not None:
        return
    original = _TAU2_OPENAI_SCHEMA
    built: cachetools.FIFOCache[tuple[Any, ...], bytes] = cachetools.FIFOCache(maxsize=4096)
    lock = threading.Lock()

    def openai_schema(self: Tool) -> dict:
        key = (
            type(self),
            self.name,
            self.short_desc,
            self.long_desc,
            getattr(self, "_use_short_desc", None),
            self.params,
        )
        with lock:
            data = built.get(key)
        if data is None:
            data = pickle.dumps(original(self), pickle.HIGHEST_PROTOCOL)
            with lock:
                built[key] = data
        return pickle.loads(data)  # noqa: S301 - our own bytes, made just above

    openai_schema.__doc__ = original.__doc__
    openai_schema.__tau2_original__ = original  # type: ignore[attr-defined]
    Tool.openai_schema = property(openai_schema)


# τ²'s own classmethod's function ``(cls, sig, docstring, predefined)``, whether or not
# it has been replaced yet.
_TAU2_PARSE_DATA: Callable[..., dict[str, Any]] = getattr(
    Tool.parse_data, "__tau2_original__", Tool.parse_data.__func__
)


def _share_tool_models() -> None:
    """τ²'s ``Tool(func)`` parses the function's docstring and builds two pydantic models
    (its parameters and its return) from its signature, for every tool of every
    environment: 15–30 tools, ~0.3 ms each, again with each episode. Here
    ``Tool.parse_data`` runs once per signature, docstring and predefined arguments (all
    it reads) and later tools get what it returned then: the same models (classes no one
    changes), their own lists. A signature or argument that cannot be a key (an
    unhashable default) is parsed every time, as τ² does.
    """
    if getattr(Tool.parse_data, "__tau2_original__", None) is not None:
        return
    original = _TAU2_PARSE_DATA
    parsed: cachetools.FIFOCache[tuple[Any, ...], dict[str, Any]] = cachetools.FIFOCache(
        maxsize=4096
    )
    lock = threading.Lock()

    def parse_data(cls: type[Tool], sig: Any, docstring: Any, predefined: Any) -> dict:
        try:
            key: tuple[Any, ...] | None = (
                cls,
                docstring,
                tuple(
                    (p.name, p.kind, p.annotation, type(p.default), p.default)
                    for p in sig.parameters.values()
                ),
                sig.return_annotation,
                tuple((k, type(v), v) for k, v in sorted(predefined.items())),
            )
            hash(key)
        except TypeError:  # an unhashable default or predefined value
            key = None
        data = None
        if key is not None:
            with lock:
                data = parsed.get(key)
        if data is None:
            data = original(cls, sig, docstring, predefined)
            if key is not None:
                with lock:
                    parsed[key] = data
        return {
            **data,
            "raises": [dict(r) for r in data.get("raises", ())],
            "examples": list(data.get("examples", ())),
        }

    parse_data.__doc__ = original.__doc__
    parse_data.__tau2_original__ = original  # type: ignore[attr-defined]
    Tool.parse_data = classmethod(parse_data)


# ------------------------------------------- τ²: environments its code builds

EnvironmentBuilder = Callable[[str, tuple[Any, ...], dict[str, Any]], Any]
"""Asked ``(domain, args, kwargs)`` of a call τ² makes to a domain's constructor:
returns the environment to hand τ² instead, or ``None`` (the next builder, else τ²'s
own constructor, then builds it)."""

_builders: contextvars.ContextVar[tuple[EnvironmentBuilder, ...]] = contextvars.ContextVar(
    "tau2_environment_builders", default=()
)


@contextlib.contextmanager
def tau2_environments_from(builder: EnvironmentBuilder) -> Iterator[None]:
    """Within the block (this thread or task), τ² code that builds an environment
    through its registry — its evaluator does, twice per score — asks ``builder`` first:
    the innermost block's builder, then the enclosing ones', then τ²'s constructor.
    Installs the overrides first (:func:`install`), without which τ² would never ask."""
    install()
    token = _builders.set((builder, *_builders.get()))
    try:
        yield
    finally:
        _builders.reset(token)


def tau2_constructor(domain: str) -> Callable[..., Any]:
    """τ²'s own constructor of ``domain``'s environment (never the dispatcher); raises
    what τ²'s registry raises for an unknown domain."""
    constructor = registry.get_env_constructor(domain)
    return getattr(constructor, "__tau2_original__", constructor)


def _dispatch_tau2_environments() -> None:
    # τ² 26.3's Registry keeps {domain: constructor} in ``_domains`` and has no setter;
    # get_env_constructor() hands out what is there.
    domains = registry._domains  # noqa: SLF001 - no public hook
    for domain, constructor in list(domains.items()):
        if not hasattr(constructor, "__tau2_original__"):
            domains[domain] = _dispatcher(domain, constructor)


def _dispatcher(domain: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def constructor(*args: Any, **kwargs: Any) -> Any:
        for builder in _builders.get():
            environment = builder(domain, args, kwargs)
            if environment is not None:
                return environment
        return original(*args, **kwargs)

    constructor.__tau2_original__ = original  # type: ignore[attr-defined]
    return constructor


# ------------------------------------------------------- litellm: lookups and clients kept

# litellm looks a model up in its price list about fifteen times per call (the cost of
# the answer, twice; the supported parameters; …). A model it does not know (most of the
# router's) is never found: each lookup tries every name variant, then every fallback
# rule's regex, and raises — and litellm's own lru_caches keep answers, not failures.
# Both are pure functions of their arguments and of the price list, so their answers are
# kept here (failures included) until the price list or the rules change. What is sent
# is not touched: only lookups are remembered.
_LOOKUPS_KEPT = 1024


class _KeptFailures:
    """Failures remembered by key (the latest :data:`_LOOKUPS_KEPT`), each raised again as
    a fresh copy: no traceback piling up."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: cachetools.FIFOCache[tuple, BaseException] = cachetools.FIFOCache(
            maxsize=_LOOKUPS_KEPT
        )

    def raise_if_known(self, key: tuple) -> None:
        with self._lock:
            failure = self._failures.get(key)
        if failure is not None:
            raise copy.copy(failure)

    def remember(self, key: tuple, exc: BaseException) -> None:
        with self._lock:
            self._failures[key] = copy.copy(exc)


class _KeptLookups:
    """``get_model_info_helper``'s failures and the fallback rules' matches, remembered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures = _KeptFailures()
        self._matches: cachetools.FIFOCache[tuple, dict | None] = cachetools.FIFOCache(
            maxsize=_LOOKUPS_KEPT
        )

    @staticmethod
    def _price_list() -> tuple[int, int]:
        return id(litellm.model_cost), len(litellm.model_cost)

    def model_info(self, lookup):
        def kept(model, custom_llm_provider=None, api_base=None, api_key=None, **options):
            key = (
                self._price_list(),
                model,
                custom_llm_provider,
                api_base,
                api_key,
                tuple(sorted(options.items())),
            )
            self._failures.raise_if_known(key)
            try:
                return lookup(
                    model=model,
                    custom_llm_provider=custom_llm_provider,
                    api_base=api_base,
                    api_key=api_key,
                    **options,
                )
            except Exception as exc:
                self._failures.remember(key, exc)
                raise

        kept.__wrapped__ = lookup  # type: ignore[attr-defined]  # as functools.wraps sets it
        return kept

    def capabilities(self, rules, match):
        def kept(model):
            key = (id(rules.capability_rules), model)
            with self._lock:
                if key in self._matches:
                    found = self._matches[key]
                    return dict(found) if found is not None else None
            found = match(model)
            with self._lock:
                self._matches[key] = dict(found) if found is not None else None
            return found

        kept.__wrapped__ = match  # type: ignore[attr-defined]  # as functools.wraps sets it
        return kept


def _keep_litellm_lookups() -> None:
    """Install :class:`_KeptLookups` in litellm (idempotent). litellm 1.82.6 (τ² 1.x's)
    has neither ``get_model_info_helper`` nor the fallback rules: its lookups are left as
    they are there (CPU only; the requests are the same)."""
    kept = _KeptLookups()
    helper = getattr(litellm_utils, "get_model_info_helper", None)
    if helper is not None and not hasattr(helper, "__wrapped__"):
        litellm_utils.get_model_info_helper = kept.model_info(helper)
        litellm_utils._get_model_info_helper = litellm_utils.get_model_info_helper
    if fallback_generalizations is None:
        return
    rules = fallback_generalizations._registry
    if "match_capabilities" not in vars(rules):
        rules.match_capabilities = kept.capabilities(rules, rules.match_capabilities)


# τ²'s generate() prices every answer with ``completion_cost(completion_response=…)``
# and records 0.0 when litellm's price list has no entry for the model ("model isn't
# mapped yet"): the Hub router's models, the server's own customer among them. litellm
# works out that it has no price anew for every answer (~0.17 ms of CPU, a customer's
# turn's largest piece after the request itself). The failure depends on the answer's
# model, its provider and service tier and the price list, not on its tokens or text:
# remembered for those, raised again as it came, and priced afresh once the price list
# changes. Answers that litellm prices are priced every time (their tokens differ).
class _UnpricedModels:
    """``completion_cost``'s "not mapped" failures, remembered (see above)."""

    def __init__(self, price: Callable[..., float]) -> None:
        self._price = price
        self._failures = _KeptFailures()
        self.__wrapped__ = price

    @staticmethod
    def _key(response: Any) -> tuple | None:
        if type(response) is not litellm.ModelResponse:
            return None
        hidden = getattr(response, "_hidden_params", None) or {}
        usage = getattr(response, "usage", None)
        try:
            named = json.dumps(
                {k: v for k, v in hidden.items() if k != "additional_headers"},
                sort_keys=True,
                default=repr,
            )
        except (TypeError, ValueError):
            return None
        return (
            _KeptLookups._price_list(),
            response.model,
            named,
            getattr(response, "service_tier", None),
            type(usage),
            getattr(usage, "service_tier", None),
        )

    def __call__(self, completion_response: Any = None, **options: Any) -> float:
        key = self._key(completion_response) if not options else None
        if key is not None:
            self._failures.raise_if_known(key)
        try:
            return self._price(completion_response=completion_response, **options)
        except litellm.exceptions.ModelNotMappedError as exc:
            if key is not None:
                self._failures.remember(key, exc)
            raise


def _keep_unpriced_models() -> None:
    """Install :class:`_UnpricedModels` as τ²'s ``completion_cost`` (idempotent). Not
    on litellm 1.82.6 (τ² 1.x's), which has no ``ModelNotMappedError`` to tell a missing
    price from another failure: τ² prices every answer afresh there."""
    if not hasattr(litellm.exceptions, "ModelNotMappedError"):
        return
    if not isinstance(tau2_llm_utils.completion_cost, _UnpricedModels):
        tau2_llm_utils.completion_cost = _UnpricedModels(tau2_llm_utils.completion_cost)


# litellm keeps one OpenAI client (an httpx client, its connection pool and TLS context)
# per key and endpoint, at most 200 of them: a server whose conversations run on more
# customers' tokens than that at once builds a client for nearly every call (about 1 ms
# of CPU each: TLS context, proxy settings read from the environment). The same clients,
# more of them kept.
CLIENTS_KEPT = 2048


def _keep_more_clients() -> None:
    cache = litellm.in_memory_llm_clients_cache
    if getattr(cache, "max_size_in_memory", CLIENTS_KEPT) < CLIENTS_KEPT:
        cache.max_size_in_memory = CLIENTS_KEPT


# ------------------------------------------------------------ litellm: cache


def _litellm_cache_off() -> None:
    litellm.cache = None
    litellm.disable_cache()


# ------------------------------------------------- litellm: the direct path for its calls

# What a call may carry to go out by the direct path: the route's keys
# (tau2_env.llm.gateway.litellm_kwargs), τ²'s own (generate: messages, tools, tool_choice) and the
# sampling arguments ``llm_args`` pass through. Any other (stream, response_format,
# functions…) changes how litellm sends or reads the call: litellm makes it.
_DIRECT_KEYS = frozenset(
    {
        "model", "messages", "tools", "tool_choice", "api_key", "api_base", "timeout",
        "retry_policy", "max_retries", "caching", "extra_headers", "temperature", "top_p",
        "max_tokens", "max_completion_tokens", "seed", "stop", "presence_penalty",
        "frequency_penalty", "reasoning_effort", "parallel_tool_calls", "user",
    }
)  # fmt: skip
_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})
_TOOL_CALL_KEYS = frozenset({"id", "name", "type", "function"})
_FUNCTION_KEYS = frozenset({"name", "arguments"})
_SHAPES_KEPT = 4096
_MISSING = object()

# The requests litellm's HTTP client sends (and their answers, read) while a direct-path
# check is under way in this thread or task; None when none is.
_seen_requests: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "tau2_seen_requests", default=None
)
# What the direct path received (an answer, or an httpx exception to raise) for the next
# request litellm's HTTP client would send in this thread or task, instead of sending it.
_replayed: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "tau2_replayed", default=None
)


@dataclass(frozen=True)
class _Failed:
    """A direct call that litellm must read: an error answer or an httpx exception."""

    what: wire.Answer | httpx.HTTPError


def _httpx_error(exc: wire.WireError) -> httpx.HTTPError:
    """The httpx exception the same failure raises in litellm's client."""
    cause = exc.cause
    message = str(exc)
    if isinstance(cause, outbound.OutboundError):
        mapped = outbound.as_httpx(cause)  # its words, the same failure as by litellm's path
        assert isinstance(mapped, httpx.HTTPError)  # each OutboundError is an httpcore one
        return mapped
    if isinstance(cause, TimeoutError):
        return httpx.ReadTimeout(message)
    if isinstance(cause, ConnectionRefusedError | socket.gaierror):
        return httpx.ConnectError(message)
    if cause is None:
        return httpx.DecodingError(message)
    if isinstance(cause, http.client.HTTPException | ConnectionError):
        return httpx.RemoteProtocolError(message)
    return httpx.ConnectError(message)


def _replay(request: httpx.Request, what: wire.Answer | httpx.HTTPError) -> httpx.Response:
    if isinstance(what, httpx.HTTPError):
        what.request = request
        raise what
    headers = [
        (name, value)
        for name, value in what.headers.items()
        if name not in ("content-encoding", "content-length", "transfer-encoding")
    ]
    return httpx.Response(
        status_code=what.status, headers=headers, content=what.body, request=request
    )


def _http_dumps(body: Mapping[str, Any]) -> bytes:
    """JSON as httpx sends a ``json=`` body (the OpenAI SDK's way): compact, UTF-8."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _message_kind(message: Any) -> tuple | None:
    """What litellm may treat differently in a message (its role, which fields are set,
    its tool calls' fields); None for one the direct path does not send (content parts,
    images, unknown fields)."""
    if type(message) is not dict:
        return None
    keys = tuple(key for key, value in message.items() if value is not None)
    if not _MESSAGE_KEYS.issuperset(keys) or not isinstance(message.get("role"), str):
        return None
    content = message.get("content")
    if content is not None and type(content) is not str:
        return None
    calls: tuple = ()
    tool_calls = message.get("tool_calls")
    if tool_calls is not None:
        if type(tool_calls) is not list:
            return None
        for call in tool_calls:
            if type(call) is not dict or not _TOOL_CALL_KEYS.issuperset(call):
                return None
            function = call.get("function")
            if type(function) is not dict or not _FUNCTION_KEYS.issuperset(function):
                return None
            if not all(type(v) is str for v in (*function.values(), call.get("id", ""))):
                return None
            calls += ((tuple(call), tuple(function)),)
    return (message["role"], keys, calls, content == "")


def _as_sent(message: dict) -> dict:
    """The message as litellm sends it to an OpenAI-style endpoint: unset fields left
    out (checked against litellm's own request, :meth:`DirectPath._check`)."""
    return {key: value for key, value in message.items() if value is not None}


@dataclass(frozen=True)
class _Shape:
    """What litellm sent for one kind of call: where, the headers (the key's value
    apart), and the body around the messages."""

    url: str
    headers: tuple[tuple[str, str], ...]
    authorization: int  # index of the Authorization header in ``headers``
    length: int  # index of the Content-Length header in ``headers``
    body: tuple[tuple[str, Any], ...]  # the body's fields in order; "messages" a slot
    timeout: float


class DirectPath:
    """Sends litellm's chat calls to OpenAI-style endpoints (``openai/…`` models: Hugging
    Face's router, OpenAI, any OpenAI-compatible server) without litellm, as litellm
    sends them: about 7 ms of CPU per call less on 2 cores (``bench/llm_call.py``).

    The first call of each *shape* (endpoint, model, arguments other than the messages
    and the key) goes through litellm, and the request its HTTP client sends is seen
    (:func:`_watch_litellm_requests`): its URL, headers and the body around the
    messages are kept, and each message is compared with :func:`_as_sent` of ours. Later
    calls of that shape whose messages are all of kinds that matched
    (:func:`_message_kind`) are built from what was kept, byte for byte what litellm
    sent for the first (``tests/tau2_env/test_llm_request.py`` compares whole
    conversations with plain litellm's), and sent by :class:`tau2_env.llm.wire.Pool`. A
    shape or a kind that did not match never goes direct (logged once).

    The answer is read as litellm reads it (the OpenAI SDK's ``construct_type``, then
    litellm's ``convert_to_model_response_object``), so τ² sees the same message, usage
    and cost. Anything but a 200 with a readable answer — an error status, a lost
    connection, a timeout — is handed to litellm as it came: litellm makes the call, and
    its HTTP client's first request gets that answer (or raises that failure, as httpx
    would) instead of going out (:data:`_replayed`). So litellm raises, maps and retries
    exactly as it always has, and no request is sent twice: a 402 costs one request.
    """

    def __init__(self, pool: wire.Pool | None = None) -> None:
        self._pool = pool or wire.Pool()
        self._lock = threading.Lock()
        # The first answer for each shape is kept; the oldest shapes make room.
        self._shapes: cachetools.FIFOCache[str, _Shape | None] = cachetools.FIFOCache(
            maxsize=_SHAPES_KEPT
        )
        self._kinds: dict[tuple, bool] = {}
        self._configs: dict[str, Any] = {}
        self.counts: dict[str, int] = {"direct": 0, "checked": 0, "litellm": 0, "replayed": 0}

    # ----------------------------------------------------------------- the call

    def complete(self, call: dict[str, Any]) -> Any:
        """``litellm.completion(**call)``'s answer, by the direct path when it may."""
        planned = self._plan(call)
        if planned is None:
            return self._litellm(call, "litellm")
        key, kinds, messages = planned
        with self._lock:
            shape = self._shapes.get(key, _MISSING)
            known = [self._kinds.get(kind) for kind in kinds]
        if shape is None or False in known:
            return self._litellm(call, "litellm")
        if shape is _MISSING or None in known:
            return self._check(call, key, kinds, messages)
        response = self._send(cast(_Shape, shape), call, messages)  # neither None nor missing
        if isinstance(response, _Failed):
            # litellm reads the answer (or the failure) as if it had sent the request:
            # it raises, maps and retries exactly as it does; nothing is sent twice.
            self._count("replayed")
            token = _replayed.set([response.what])
            try:
                return litellm.completion(**call)
            finally:
                _replayed.reset(token)
        self._count("direct")
        return response

    def _litellm(self, call: dict[str, Any], why: str) -> Any:
        self._count(why)
        return litellm.completion(**call)

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def _plan(self, call: dict[str, Any]) -> tuple[str, list[tuple], list[dict]] | None:
        if not config.llm_direct() or not str(call.get("model", "")).startswith("openai/"):
            return None
        if not _DIRECT_KEYS.issuperset(call) or _litellm_has_callbacks() or _proxied():
            return None
        messages = call.get("messages")
        if type(messages) is not list or not messages:
            return None
        kinds = [_message_kind(message) for message in messages]
        if None in kinds:
            return None
        around = {k: v for k, v in call.items() if k not in ("messages", "api_key")}
        try:
            key = json.dumps(around, sort_keys=True, default=repr)
        except (TypeError, ValueError):
            return None
        known = cast(list[tuple], kinds)  # no None: checked above
        return key, known, [_as_sent(message) for message in messages]

    # ------------------------------------------------------- the check, by litellm

    def _check(self, call: dict[str, Any], key: str, kinds: list, messages: list) -> Any:
        self._count("checked")
        seen: list = []
        token = _seen_requests.set(seen)
        try:
            response = litellm.completion(**call)
        finally:
            _seen_requests.reset(token)
        shape, kept = self._learn(call, seen, messages)
        with self._lock:
            # A shape whose request differed apart from the messages never goes direct;
            # a kind of message that differed never does, in any shape.
            if kept and key not in self._shapes:
                if shape is None:
                    log.info("direct path off for %s calls like this one: litellm sent "
                             "them otherwise", call["model"])  # fmt: skip
                self._shapes[key] = shape
            for kind, same in zip(kinds, kept, strict=False):
                if not same:
                    self._kinds[kind] = False
                else:
                    self._kinds.setdefault(kind, True)
        return response

    def _learn(
        self, call: dict[str, Any], seen: list, messages: list
    ) -> tuple[_Shape | None, list[bool]]:
        """What the request litellm sent (``seen``) says: the shape to keep (None when it
        cannot be rebuilt) and, per message, whether ours is what litellm sent."""
        if len(seen) != 1:
            return None, []
        request, answer = seen[0]
        if request.method != "POST" or answer.status_code != 200:
            return None, []  # nothing learnt; the next call checks again
        try:
            sent = json.loads(request.content)
        except ValueError:
            return None, []
        theirs = sent.get("messages") if isinstance(sent, dict) else None
        if not isinstance(theirs, list) or len(theirs) != len(messages):
            return None, []
        kept = [mine == their for mine, their in zip(messages, theirs, strict=True)]
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        names = [name.lower() for name, _ in headers]
        if names.count("authorization") != 1 or names.count("content-length") != 1:
            return None, kept
        authorization = names.index("authorization")
        if headers[authorization][1] != f"Bearer {call['api_key']}":
            return None, kept
        body = tuple((k, None if k == "messages" else v) for k, v in sent.items())
        shape = _Shape(
            url=str(request.url),
            headers=tuple(headers),
            authorization=authorization,
            length=names.index("content-length"),
            body=body,
            timeout=float(call.get("timeout") or 600.0),
        )
        rebuilt = self._body(shape, theirs)
        if rebuilt != request.content or self._headers(shape, call, len(rebuilt)) != headers:
            return None, kept
        return shape, kept

    # ---------------------------------------------------------------- the send

    @staticmethod
    def _body(shape: _Shape, messages: list) -> bytes:
        return _http_dumps({k: (messages if k == "messages" else v) for k, v in shape.body})

    @staticmethod
    def _headers(shape: _Shape, call: dict[str, Any], length: int) -> list[tuple[str, str]]:
        headers = list(shape.headers)
        headers[shape.authorization] = (
            headers[shape.authorization][0],
            f"Bearer {call['api_key']}",
        )
        headers[shape.length] = (headers[shape.length][0], str(length))
        return headers

    def _send(self, shape: _Shape, call: dict[str, Any], messages: list) -> Any:
        """The answer to the call sent by the direct path, or :class:`_Failed` (what
        litellm is to read instead of sending)."""
        body = self._body(shape, messages)
        try:
            answer = self._pool.post(
                shape.url,
                headers=self._headers(shape, call, len(body)),
                body=body,
                timeout=shape.timeout,
            )
        except wire.WireError as exc:
            return _Failed(_httpx_error(exc))
        if answer.status != 200:
            return _Failed(answer)
        try:
            return self._response(call["model"], json.loads(answer.body), answer.headers)
        except Exception:  # noqa: BLE001 - litellm reads it, and reports what it finds
            return _Failed(answer)

    def _response(self, model: str, data: Any, headers: dict[str, str]) -> Any:
        """The answer as litellm's OpenAI route makes it (``OpenAIChatCompletion``:
        the SDK's lenient parse, the provider's repair, ``convert_to_model_response_object``)."""
        if not isinstance(data, dict):
            raise ValueError("the answer is not a JSON object")
        parsed = openai_models.construct_type(type_=openai_chat.ChatCompletion, value=data)
        provider_config = self._provider_config(model.removeprefix("openai/"))
        repair = getattr(provider_config, "transform_parsed_response_dict", None)
        if repair is None:
            # litellm 1.82 (τ² 1.x's) has no provider repair: its OpenAI route converts
            # the SDK's model_dump() as it is.
            fixed = cast(Any, parsed).model_dump()
        else:
            fixed = repair(openai_common.model_dump_provider_response(parsed))
        response = litellm.ModelResponse()
        response.usage = litellm.Usage()  # as litellm.completion starts it: kept if none comes
        response._hidden_params["custom_llm_provider"] = "openai"
        response._hidden_params["region_name"] = None
        return convert_dict_to_response.convert_to_model_response_object(
            response_object=fixed, model_response_object=response, _response_headers=headers
        )

    def _provider_config(self, model: str) -> Any:
        found = self._configs.get(model)
        if found is None:
            found = litellm_utils.ProviderConfigManager.get_provider_chat_config(
                model=model, provider=litellm.LlmProviders.OPENAI
            )
            found = found or litellm.OpenAIConfig()
            self._configs[model] = found
        return found


def _litellm_has_callbacks() -> bool:
    """Callbacks someone gave litellm would not see a direct call: litellm makes it.

    litellm's own ``"cache"`` entries do not count while its cache is off (as
    :func:`_litellm_cache_off` keeps it): every ``Cache()`` adds them, and its Vertex/Gemini
    context caching makes one when first imported, so a first Gemini call took the whole
    process off the direct path."""
    lists = (
        litellm.callbacks,
        litellm.success_callback,
        litellm.failure_callback,
        litellm.input_callback,
        litellm._async_success_callback,
    )
    inert = ("cache",) if litellm.cache is None else ()
    return any(callback not in inert for callbacks in lists for callback in callbacks)


# The proxies httpx (trust_env) takes from the environment. With one set, litellm makes
# every call (tau2_env.llm.wire trusts the certificates httpx does, and goes direct).
_HTTPX_ENVIRONMENT = tuple(
    name for base in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY") for name in (base, base.lower())
)


def _proxied() -> bool:
    """Whether httpx would send through a proxy, or litellm not verify certificates:
    then litellm makes the call."""
    environ = os.environ
    return any(name in environ for name in _HTTPX_ENVIRONMENT) or litellm.ssl_verify is not True


def _watch_litellm_requests() -> None:
    """litellm's requests go out through :class:`tau2_env.llm.outbound.Transport` (its
    OpenAI clients' session, :func:`tau2_env.llm.gateway.litellm_kwargs`), which hands each to
    :func:`_observe`: the direct path's check of what litellm sends."""
    outbound.set_request_observer(_observe)


def _observe(request: httpx.Request, send: outbound.Send) -> httpx.Response:
    """Send ``request`` — or answer it with what the direct path received for it
    (:data:`_replayed`) — and note it, its answer read, while :data:`_seen_requests` is set."""
    replayed = _replayed.get()
    if replayed:
        return _replay(request, replayed.pop())
    response = send(request)
    seen = _seen_requests.get()
    if seen is not None:
        response.read()
        seen.append((request, response))
    return response


DIRECT = DirectPath()


def _send_direct() -> None:
    """The direct path, on the litellm releases whose internals it reads
    (``versions.DIRECT_PATH_LITELLM``); on the others — 1.82.6, τ² 1.x's, lacks
    ``model_dump_provider_response`` and ``transform_parsed_response_dict`` — it stays
    off and every call goes through litellm, as with ``TAU2_LLM_DIRECT=off``."""
    if installed_version("litellm") not in versions.DIRECT_PATH_LITELLM:
        log.info(
            "The direct path is off: litellm %s lacks the internals it reads",
            installed_version("litellm"),
        )
        return
    gateway.use_sender(DIRECT.complete)


# ----------------------------------------------------- openenv: its sessions


class OpenEnvSessionHooks(Protocol):
    """What the OpenEnv face is told of openenv's sessions (see :func:`openenv_server_class`)."""

    async def admit(self) -> tuple[Any, bool]:
        """A session is opening: what it holds (a slot, say) and whether its connection
        closes it itself, so openenv's idle reaper must leave it alone. Raises openenv's
        ``SessionCapacityError`` or ``EnvironmentFactoryError`` to refuse it."""
        ...

    def opened(self, held: Any, session_id: str) -> None:
        """The session holding ``held`` is open as ``session_id``."""
        ...

    def touch(self, held: Any) -> None:
        """The session holding ``held`` did something."""
        ...

    def release(self, held: Any) -> None:
        """The session holding ``held`` is gone, or could not be opened after all."""
        ...


def openenv_server_class() -> type[HTTPEnvServer]:
    """openenv's ``HTTPEnvServer``, telling the ``hooks=`` it is built with
    (:class:`OpenEnvSessionHooks`) when each session opens, acts and closes. openenv
    0.10 has no public hook for that; its sessions go through ``_create_session``,
    ``_update_session_activity`` and ``_cleanup_session_resources``, and a session in
    ``_session_websocket_attachments`` is spared by its idle reaper. Raises
    :class:`UntestedVersion` on another openenv."""
    require("openenv")
    return _openenv_server_class()


@functools.cache
def _openenv_server_class() -> type[HTTPEnvServer]:
    # Here, not at the top: openenv's package imports gradio (see the module docstring).
    from openenv.core.env_server.http_server import HTTPEnvServer

    class HookedEnvServer(HTTPEnvServer):
        def __init__(self, *args: Any, hooks: OpenEnvSessionHooks, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._hooks = hooks
            self._held_by_env: dict[int, object] = {}
            self._held_by_session: dict[str, object] = {}

        async def _create_session(self) -> tuple[str, Any]:
            held, spare = await self._hooks.admit()
            try:
                session_id, env = await super()._create_session()
            except BaseException:
                self._hooks.release(held)
                raise
            self._held_by_env[id(env)] = held
            self._held_by_session[session_id] = held
            if spare:
                async with self._session_lock:
                    self._session_websocket_attachments.add(session_id)
            self._hooks.opened(held, session_id)
            return session_id, env

        def held_by(self, session_id: str) -> Any:
            """What the open session ``session_id`` holds, or ``None`` (no such session)."""
            return self._held_by_session.get(session_id)

        async def close_session(self, session_id: str, *, reason: str | None = None) -> None:
            """Close ``session_id`` as ``openenv/session/close`` does: at once, or (with
            a WebSocket attached) when that WebSocket ends; its environment's
            ``close_reason`` (if it has one) becomes ``reason``."""
            async with self._session_lock:
                env = self._sessions.get(session_id)
                if reason and env is not None and hasattr(env, "close_reason"):
                    env.close_reason = reason
                if session_id in self._session_websocket_attachments:
                    self._session_pending_closes.add(session_id)
                    return
            await self._destroy_session(session_id)

        async def _cleanup_session_resources(
            self, env: Any, executor: Any, stack: Any = None
        ) -> None:
            try:
                await super()._cleanup_session_resources(env, executor, stack)
            finally:
                held = self._held_by_env.pop(id(env), None)
                if held is not None:
                    self._hooks.release(held)
                    for session_id, other in list(self._held_by_session.items()):
                        if other is held:
                            del self._held_by_session[session_id]

        def _update_session_activity(self, session_id: str, increment_step: bool = False) -> None:
            super()._update_session_activity(session_id, increment_step)
            held = self._held_by_session.get(session_id)
            if held is not None:
                self._hooks.touch(held)

    return HookedEnvServer


def with_capacity_details(text: str | bytes, details: Mapping[str, Any]) -> str | None:
    """``text`` with ``details`` added if it is openenv 0.10's refusal of a session
    (``SessionCapacityError``) as openenv sends it, else ``None``.

    openenv sends that refusal as a WebSocket error frame on ``/ws`` — ``{"type":
    "error", "data": {"code": "CAPACITY_REACHED", "message", "active_sessions",
    "max_sessions"}}`` — and as a JSON-RPC error whose ``data`` holds
    ``active_sessions`` and ``max_sessions`` on ``/mcp`` (HTTP and WebSocket); the
    details go into that ``data``.
    """
    try:
        frame = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(frame, dict):
        return None
    data = frame.get("data")
    is_ws_refusal = (
        frame.get("type") == "error"
        and isinstance(data, dict)
        and data.get("code") == "CAPACITY_REACHED"
    )
    if not is_ws_refusal:
        error = frame.get("error")
        data = error.get("data") if isinstance(error, dict) else None
        if not (isinstance(data, dict) and {"active_sessions", "max_sessions"} <= data.keys()):
            return None
    assert isinstance(data, dict)  # either branch above checked it
    data.update(details)
    return json.dumps(frame)


# ----------------------------------------------------- MCP SDK: its sessions


# Callable, not type[...]: the class takes on_open and on_discard, which the SDK's does not.
def mcp_session_manager_class() -> Callable[..., StreamableHTTPSessionManager]:
    """The SDK's ``StreamableHTTPSessionManager``, built with ``on_open(session_id)``
    (called as it admits a session, in the task serving the opening request) and
    ``on_discard(session_id)`` (awaited once it has discarded one: client DELETE, idle
    timeout, a failed opening, shutdown; possibly more than once per session), with
    ``open_sessions()`` and ``discard(session_id)`` for a reaper of its own. SDK 1.30
    admits and discards sessions in ``_admit_session`` and ``_discard_session`` and
    keeps them in ``_server_instances``. Raises :class:`UntestedVersion` on another SDK."""
    require("mcp")
    return _mcp_session_manager_class()


@functools.cache
def _mcp_session_manager_class() -> Callable[..., StreamableHTTPSessionManager]:
    # Here, like openenv: only the MCP face needs the SDK's server side.
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    class ObservedSessionManager(StreamableHTTPSessionManager):
        def __init__(
            self,
            *args: Any,
            on_open: Callable[[str], None],
            on_discard: Callable[[str], Awaitable[None]],
            **kwargs: Any,
        ) -> None:
            super().__init__(*args, **kwargs)
            self._on_open = on_open
            self._on_discard = on_discard

        def _admit_session(self, requestor: Any) -> Any:
            transport = super()._admit_session(requestor)
            if transport is not None:
                assert transport.mcp_session_id is not None  # the SDK gives each one an id
                self._on_open(transport.mcp_session_id)
            return transport

        async def _discard_session(self, session_id: str, transport: Any) -> None:
            try:
                await super()._discard_session(session_id, transport)
            finally:
                await self._on_discard(session_id)

        def open_sessions(self) -> list[str]:
            """The ids of the sessions the manager holds now."""
            return list(self._server_instances)

        async def discard(self, session_id: str) -> None:
            """Close and forget the session (as its idle timeout would); no-op if gone."""
            transport = self._server_instances.get(session_id)
            if transport is not None:
                await self._discard_session(session_id, transport)

    return ObservedSessionManager

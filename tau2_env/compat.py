"""Every use of a library's private internals, in one module, for tested versions only.

tau2_env builds on four libraries whose public APIs leave a few things out. Wherever it
relies on their internals it does so here, and only with the versions in :data:`TESTED`:
on any other, :func:`require` raises :class:`UntestedVersion`, naming the library, the
version found and the version tested (a private name can change in any release).

Process-wide overrides, applied by :func:`install` (explicit, idempotent; called by the
Episode, the OpenEnv and MCP faces, and by the web project at start-up):

* τ² ``tau2.utils.llm_utils.completion`` (the global τ²'s ``generate`` calls litellm
  through) becomes :func:`tau2_env.llm.routed_completion`: every LLM call τ² makes —
  the customer, τ²'s agent, the NL judge — goes along the current conversation's route,
  and one made outside a conversation fails instead of using the server's keys.
* τ² ``Tool.openai_schema`` is built once per tool, each caller getting a deep copy of
  exactly what τ² built (it rebuilt the pydantic JSON schema at every LLM call).
* τ² ``Registry._domains``: each domain's constructor gets a dispatcher that asks the
  builders registered with :func:`tau2_environments_from` first. τ²'s evaluator builds
  its two environments per score through the registry and offers no other hook.
* litellm's module-wide response cache is switched off: its key may ignore ``api_key``,
  so one visitor could be served another's answer.
* litellm's price-list lookups (``utils.get_model_info_helper``, failures included, and
  the fallback rules' ``match_capabilities``) are remembered until the price list or the
  rules change, and up to :data:`CLIENTS_KEPT` of its per-key clients are kept instead
  of 200: less CPU per call, the same requests (``tests/tau2_env/test_llm_request.py``).

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
import json
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

# isort: off
# τ² (and litellm) only through tau2_env._tau2 first: quiet import, local price list.
from tau2_env._tau2 import registry
import litellm
import tau2.utils.llm_utils as tau2_llm_utils
from litellm import utils as litellm_utils
from litellm.litellm_core_utils import fallback_generalizations
from tau2.environment.tool import Tool

# isort: on
from tau2_env import llm, versions
from tau2_env.versions import TESTED, UntestedVersion, installed_version, require

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from openenv.core.env_server.http_server import HTTPEnvServer

__all__ = [
    "TESTED",
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
        _cache_tool_schemas()
        _dispatch_tau2_environments()
        _litellm_cache_off()
        _keep_litellm_lookups()
        _keep_more_clients()
        _installed = True


# --------------------------------------------------------- τ²: its LLM calls


def _route_tau2_llm_calls() -> None:
    # τ² 26.3's generate() calls ``completion(...)``, imported into its module from
    # litellm: replacing that global routes every τ² call and nothing else.
    tau2_llm_utils.completion = llm.routed_completion


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
    once per tool object (tools are built with their environment and never change) and
    each caller gets its own deep copy of that result: the same dict τ² would have built.
    The last 4,096 tools are remembered (a few hundred KB).
    """
    if getattr(Tool.openai_schema.fget, "__tau2_original__", None) is not None:
        return
    original = _TAU2_OPENAI_SCHEMA
    built: OrderedDict[int, tuple[Tool, dict]] = OrderedDict()
    lock = threading.Lock()

    def openai_schema(self: Tool) -> dict:
        with lock:
            entry = built.get(id(self))
        if entry is None or entry[0] is not self:
            entry = (self, original(self))
            with lock:
                built[id(self)] = entry
                while len(built) > 4096:
                    built.popitem(last=False)
        return copy.deepcopy(entry[1])

    openai_schema.__doc__ = original.__doc__
    openai_schema.__tau2_original__ = original  # type: ignore[attr-defined]
    Tool.openai_schema = property(openai_schema)  # type: ignore[method-assign,assignment]


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


class _KeptLookups:
    """``get_model_info_helper``'s failures and the fallback rules' matches, remembered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: OrderedDict[tuple, BaseException] = OrderedDict()
        self._matches: OrderedDict[tuple, dict | None] = OrderedDict()

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
            with self._lock:
                failure = self._failures.get(key)
            if failure is not None:
                raise copy.copy(failure)  # a fresh exception: no traceback piling up
            try:
                return lookup(
                    model=model,
                    custom_llm_provider=custom_llm_provider,
                    api_base=api_base,
                    api_key=api_key,
                    **options,
                )
            except Exception as exc:
                with self._lock:
                    self._failures[key] = copy.copy(exc)
                    while len(self._failures) > _LOOKUPS_KEPT:
                        self._failures.popitem(last=False)
                raise

        kept.__wrapped__ = lookup
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
                while len(self._matches) > _LOOKUPS_KEPT:
                    self._matches.popitem(last=False)
            return found

        kept.__wrapped__ = match
        return kept


def _keep_litellm_lookups() -> None:
    """Install :class:`_KeptLookups` in litellm (idempotent)."""
    kept = _KeptLookups()
    helper = litellm_utils.get_model_info_helper
    if not hasattr(helper, "__wrapped__"):
        litellm_utils.get_model_info_helper = kept.model_info(helper)
        litellm_utils._get_model_info_helper = litellm_utils.get_model_info_helper
    rules = fallback_generalizations._registry
    if "match_capabilities" not in vars(rules):
        rules.match_capabilities = kept.capabilities(rules, rules.match_capabilities)


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
    data.update(details)
    return json.dumps(frame)


# ----------------------------------------------------- MCP SDK: its sessions


def mcp_session_manager_class() -> type[StreamableHTTPSessionManager]:
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
def _mcp_session_manager_class() -> type[StreamableHTTPSessionManager]:
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

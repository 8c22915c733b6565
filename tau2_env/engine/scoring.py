"""The expected side of τ²'s database check, computed once per task instead of per score.

τ²'s ``EnvironmentEvaluator`` builds a gold environment for every score: it applies the
task's initial state, plays the task's expected actions on it (``make_tool_call``,
errors logged and ignored) and compares its database hashes with the conversation's.
That result depends only on the task (and τ²'s version), yet it costs a fresh database
and every expected action on each score.

Inside :func:`expected_side_cached`, the environment τ²'s evaluator builds with no
arguments (its gold environment, asked of τ²'s registry: see
``tau2_env.llm.compat.tau2_environments_from``) is an :class:`ExpectedEnvironment`: it
records ``set_state`` and ``make_tool_call`` and, when asked for the database hashes,
answers from a process-wide cache keyed by the domain, τ²'s version and exactly what
was recorded — computing them on a real environment the first time, by the same calls
in the same order. Anything else asked of it builds that
real environment and answers from it, so the stand-in never answers differently from
the environment it replaces; only the moment the recorded calls run changes.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import cachetools

from tau2_env.engine import catalog, environments
from tau2_env.llm import compat

__all__ = ["ExpectedEnvironment", "cache_clear", "cache_info", "expected_side_cached", "stand_in"]

_MAX_ENTRIES = 20_000  # a few hundred bytes each; every task of every domain fits
# Whole expected environments, for views that need more than the hashes (the database
# diff of tau2_env.engine.diagnosis): copy-on-access ones hold only the rows their calls
# touched; telecom's are whole (~100 KB).
_MAX_ENVIRONMENTS = 256

_scope = contextvars.ContextVar("tau2_expected_side_cached", default=False)
_lock = threading.Lock()


def _by_key(key: str, _build: Callable[[], Any]) -> str:
    return key


@cachetools.cached(cachetools.LRUCache(maxsize=_MAX_ENTRIES), key=_by_key, lock=_lock, info=True)
def _hashes_of(key: str, build: Callable[[], Any]) -> tuple[Any, Any]:
    """The database hashes of the environment the recorded calls ``key`` make (built
    by ``build`` on a miss)."""
    real = build()
    return real.get_db_hash(), real.get_user_db_hash()


@cachetools.cached(cachetools.LRUCache(maxsize=_MAX_ENVIRONMENTS), key=_by_key, lock=_lock)
def _environment_of(key: str, build: Callable[[], Any]) -> Any:
    """The environment the recorded calls ``key`` make, built once by ``build``."""
    return build()


@contextlib.contextmanager
def expected_side_cached() -> Iterator[None]:
    """Within the block (this thread or task), τ²'s gold environment is a stand-in
    whose database hashes come from the cache (see the module docstring)."""
    token = _scope.set(True)
    try:
        with compat.tau2_environments_from(_gold_stand_in):
            yield
    finally:
        _scope.reset(token)


def _gold_stand_in(domain: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # τ²'s evaluator builds its gold environment with no arguments at all.
    return stand_in(domain) if not args and not kwargs else None


def stand_in(domain: str) -> ExpectedEnvironment | None:
    """The stand-in for an argument-less environment of ``domain``, inside the scope."""
    return ExpectedEnvironment(domain) if _scope.get() else None


def cache_info() -> dict[str, int]:
    """Hits, misses and entries of the cache (for benchmarks and tests)."""
    info = _hashes_of.cache_info()
    return {"hits": info.hits, "misses": info.misses, "entries": int(info.currsize)}


def cache_clear() -> None:
    _hashes_of.cache_clear()
    _environment_of.cache_clear()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


class ExpectedEnvironment:
    """Records what is done to it; answers database hashes from the cache."""

    def __init__(self, domain: str) -> None:
        self._domain = domain
        self._calls: list[tuple[str, dict[str, Any]]] = []
        self._real: Any = None

    def set_state(self, **kwargs: Any) -> None:
        if self._real is not None:
            self._real.set_state(**kwargs)
        self._calls.append(("set_state", kwargs))

    def make_tool_call(self, tool_name: str, requestor: str = "assistant", **kwargs: Any) -> Any:
        if self._real is not None:
            return self._real.make_tool_call(tool_name=tool_name, requestor=requestor, **kwargs)
        # τ²'s evaluator ignores the result and logs and skips a failing call; the real
        # environment replays this call (failing the same way) when it is built.
        self._calls.append(
            ("make_tool_call", {"tool_name": tool_name, "requestor": requestor, **kwargs})
        )
        return None

    def get_db_hash(self) -> Any:
        return self._hashes()[0]

    def get_user_db_hash(self) -> Any:
        return self._hashes()[1]

    def __getattr__(self, name: str) -> Any:
        # Anything else: the real environment, in the state the recorded calls made.
        return getattr(self._materialize(), name)

    def shared_environment(self) -> Any:
        """The real environment in the state the recorded calls make: built once per
        domain, τ²'s version and calls (the hashes' key), then the same object for every
        stand-in with those calls. Shared: read it, never change it."""
        # Built anew, never self._real, which later calls may still change.
        return _environment_of(self._key(), self._build)

    def _key(self) -> str:
        payload = json.dumps(
            [self._domain, catalog.tau2_version(), _jsonable(self._calls)],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def _hashes(self) -> tuple[Any, Any]:
        if self._real is not None:
            return self._real.get_db_hash(), self._real.get_user_db_hash()
        return _hashes_of(self._key(), self._materialize)

    def _materialize(self) -> Any:
        if self._real is None:
            self._real = self._build()
        return self._real

    def _build(self) -> Any:
        """A real environment, after the recorded calls in their order."""
        real = environments.fresh_environment(self._domain)
        for kind, kwargs in self._calls:
            if kind == "set_state":
                real.set_state(**kwargs)
            else:
                with contextlib.suppress(Exception):  # as τ²'s evaluator does
                    real.make_tool_call(**kwargs)
        return real

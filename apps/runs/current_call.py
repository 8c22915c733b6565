"""The LLM call each live run waits for, kept where a page opened mid-call can read it.

``run.call`` group messages (``apps.runs.events.CallMessage``) reach the pages open when
they are sent; a page opened (or reconnected) while a call waits or retries would say
"Live…" until the next one. So :func:`apps.runs.events.call_publish` also keeps the
latest notice of a call under way here, one small record per run, and the run's consumer
sends it on connect (:func:`call_current`).

A record lasts no longer than its call may: its TTL is the time the call's attempts left
may still take (each attempt's timeout, plus the wait before the next) and a margin, so a
worker that died mid-call leaves nothing behind for long. It is removed when the call
answers or fails, and when the run ends (:func:`call_forget`).

With ``REDIS_URL`` the records live in Redis, under the channel layer's prefix
(``<prefix>:run-call:<run id>``), shared by every worker and web process; without it (a
laptop's single process, in-memory channel layer) in this process's memory. Redis being
unreachable never fails a run: the page then merely waits for the next notice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import redis
from django.conf import settings

__all__ = ["MARGIN_SECONDS", "call_current", "call_forget", "call_keep", "record_ttl"]

logger = logging.getLogger(__name__)

# Added to a record's TTL: the notice that replaces it is sent just after its deadline.
MARGIN_SECONDS = 5.0
# Phases of a call still under way (``CallNotice.phase``); "answered" and "failed" end it.
UNDER_WAY = frozenset({"waiting", "retrying", "again"})


def record_ttl(message: dict[str, Any]) -> float:
    """Seconds a notice may stand for its call: the attempts it has left, each up to its
    timeout, after the wait before the next (for ``"again"``, the worker's wait before the
    turn's first attempt), and :data:`MARGIN_SECONDS`."""
    timeout = float(message.get("timeout") or 0)
    wait = float(message.get("wait") or 0)
    if message.get("phase") == "again":
        return wait + timeout + MARGIN_SECONDS
    left = max(1, int(message.get("attempts") or 1) - int(message.get("attempt") or 1) + 1)
    return wait + left * timeout + MARGIN_SECONDS


def call_keep(*, run_id: int, message: dict[str, Any]) -> None:
    """Keep ``message`` (a ``run.call`` message) as run ``run_id``'s call in flight while
    its phase is one of a call under way; forget it once the call answered or failed."""
    if message.get("phase") not in UNDER_WAY:
        call_forget(run_id=run_id)
        return
    ttl = record_ttl(message)
    record = json.dumps({**message, "at": time.time()})
    _store().put(_key(run_id), record, ttl)


def call_forget(*, run_id: int) -> None:
    """No call of run ``run_id`` is under way (it answered, failed, or the run ended)."""
    _store().drop(_key(run_id))


def call_current(*, run_id: int, now: float | None = None) -> dict[str, Any] | None:
    """The notice of run ``run_id``'s call under way as it stands now: its ``seconds``
    with the time since it was kept added, its ``wait`` (before the next attempt) with
    it taken off (``now``: the wall clock's time, by default the current one); or
    ``None``."""
    raw = _store().get(_key(run_id))
    if raw is None:
        return None
    try:
        record = json.loads(raw)
        at = float(record.pop("at"))
    except (ValueError, KeyError, TypeError):
        return None
    since = max(0.0, (time.time() if now is None else now) - at)
    record["seconds"] = round(float(record.get("seconds") or 0) + since, 1)
    record["wait"] = round(max(0.0, float(record.get("wait") or 0) - since), 1)
    return record


def _key(run_id: int) -> str:
    prefix = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("prefix", "tau2")
    return f"{prefix}:run-call:{run_id}"


class _RedisStore:
    def __init__(self, url: str) -> None:
        self._redis = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)

    def put(self, key: str, value: str, ttl: float) -> None:
        try:
            self._redis.set(key, value, px=max(1, round(ttl * 1000)))
        except redis.RedisError:
            logger.warning("Keeping a run's call in flight in Redis failed", exc_info=True)

    def drop(self, key: str) -> None:
        try:
            self._redis.delete(key)
        except redis.RedisError:
            # It expires with its TTL.
            logger.warning("Forgetting a run's call in flight in Redis failed", exc_info=True)

    def get(self, key: str) -> str | None:
        try:
            value = self._redis.get(key)
        except redis.RedisError:
            logger.warning("Reading a run's call in flight from Redis failed", exc_info=True)
            return None
        return value.decode() if isinstance(value, bytes) else value


class _MemoryStore:
    """One process's records (no ``REDIS_URL``: the in-memory channel layer is one
    process's too)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, tuple[float, str]] = {}

    def put(self, key: str, value: str, ttl: float) -> None:
        with self._lock:
            self._records[key] = (time.monotonic() + ttl, value)

    def drop(self, key: str) -> None:
        with self._lock:
            self._records.pop(key, None)

    def get(self, key: str) -> str | None:
        with self._lock:
            until, value = self._records.get(key, (0.0, ""))
            if until <= time.monotonic():
                self._records.pop(key, None)
                return None
            return value


_stores: dict[str, _RedisStore | _MemoryStore] = {}
_stores_lock = threading.Lock()


def _store() -> _RedisStore | _MemoryStore:
    """This process's store for ``REDIS_URL`` (one client, made on first use)."""
    url = settings.REDIS_URL or ""
    with _stores_lock:
        if url not in _stores:
            _stores[url] = _RedisStore(url) if url else _MemoryStore()
        return _stores[url]

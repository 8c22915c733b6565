"""Session caps that hold across the processes of one server, and across its hosts.

:mod:`tau2_env.gate.session_router` runs several OpenEnv processes behind one port, and spreads one
client's sessions over all of them; a team that outgrows one machine runs routers on several
hosts. A client's cap (a person's, a studio key's own) must count its sessions on every process,
so the processes share a ledger of open sessions: :class:`SharedSessionSlots` is
:class:`~tau2_env.gate.capacity.SessionSlots` that, once this process would grant a slot, asks the
ledger to *claim* it — one atomic step that counts the client's live slots everywhere and adds
this one only under the cap, so two processes never both grant a client's last slot. A slot
released (its session closed) leaves the ledger at once. ``MAX_CONCURRENT_ENVS`` (the total) stays
per process: it is what one process's thread pool and memory hold.

Two ledgers, picked by :func:`ledger_from_config`:

* :class:`RedisSlotLedger`, when ``TAU2_SLOTS_URL`` names a Redis every host reaches (compose sets
  it to the deployment's Redis): each slot holds a lease of ``TAU2_SLOTS_LEASE_SECONDS`` (30 s),
  renewed every third of it while its session lives, so the slots of a host that dies stop
  counting within a lease. The claim is a Lua script on Redis's clock (hosts' clocks may differ).
  When Redis cannot be reached, a new session is refused (503, retry in a few seconds) rather
  than granted uncounted.
* :class:`FileSlotLedger`, else, behind one router: a SQLite file the router names in
  ``TAU2_SLOTS_LEDGER`` for the processes it starts (one host; a process that dies stops counting
  once its pid is gone). No network in the session path, nothing more to run on a laptop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Protocol

import redis

from tau2_env import config
from tau2_env.gate.capacity import CapacityReached, SessionSlots, Slot

__all__ = [
    "LEDGER_VARIABLE",
    "FileSlotLedger",
    "LedgerUnavailable",
    "RedisSlotLedger",
    "SharedSessionSlots",
    "SlotLedger",
    "ledger_from_config",
    "session_slots_from_config",
]

logger = logging.getLogger(__name__)

LEDGER_VARIABLE = "TAU2_SLOTS_LEDGER"
# A refusal while the shared ledger cannot be reached: retry in this many seconds.
UNAVAILABLE_RETRY_S = 5


class LedgerUnavailable(Exception):
    """The shared ledger cannot be reached (no slot can be counted, so none is granted)."""


class SlotLedger(Protocol):
    """Where the processes of a server count their open slots."""

    def claim(self, slot: Slot, *, cap: int) -> tuple[bool, int]:
        """Add ``slot`` if its client holds fewer than ``cap`` live slots everywhere, in one
        atomic step; returns whether it was added and the client's slots counted (with it
        when added). Raises :class:`LedgerUnavailable`."""
        ...

    def release(self, slot: Slot) -> None:
        """Remove ``slot`` (idempotent; a slot this ledger does not hold is ignored)."""
        ...

    def held(self, client: str) -> int:
        """``client``'s live slots, on every process."""
        ...


class SharedSessionSlots(SessionSlots):
    """:class:`~tau2_env.gate.capacity.SessionSlots` whose caps count every process's slots
    in ``ledger`` (see the module docstring)."""

    def __init__(self, *, ledger: SlotLedger, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ledger = ledger

    @classmethod
    def from_config(cls, ledger: SlotLedger | None = None) -> SharedSessionSlots:
        """:meth:`SessionSlots.from_config` on ``ledger`` (default:
        :func:`ledger_from_config`'s, which must name one)."""
        ledger = ledger or ledger_from_config()
        if ledger is None:
            raise config.ConfigError(f"Neither TAU2_SLOTS_URL nor {LEDGER_VARIABLE} is set")
        plain = SessionSlots.from_config()
        return cls(
            ledger=ledger,
            total=plain.total,
            per_client=plain.per_client,
            per_key_max=plain.per_key_max,
            idle_seconds=plain.idle_seconds,
        )

    def acquire(
        self,
        client: str,
        *,
        limit: int | None = None,
        owner: str = "",
        check: Callable[[], None] | None = None,
    ) -> Slot:
        """:meth:`SessionSlots.acquire`, then the ledger's claim: a client at its cap on
        the other processes (or hosts) is refused like one at its cap here."""
        slot = super().acquire(client, limit=limit, owner=owner, check=check)
        cap = self.cap_for(limit)
        try:
            granted, held = self.ledger.claim(slot, cap=cap)
        except LedgerUnavailable as exc:
            super().release(slot)
            raise CapacityReached(
                "CAPACITY_REACHED: the ledger of open sessions that this server's hosts share "
                f"cannot be reached; retry in {UNAVAILABLE_RETRY_S} s.",
                retry_after=UNAVAILABLE_RETRY_S,
                active=0,
                limit=cap,
            ) from exc
        except BaseException:
            super().release(slot)
            raise
        if not granted:
            super().release(slot)
            raise self.client_full(client, held=held, cap=cap)
        return slot

    def release(self, slot: Slot | None) -> None:
        super().release(slot)
        if slot is not None:
            self.ledger.release(slot)


# ---------------------------------------------------------------- Redis: every host


# KEYS[1]: the client's sorted set; ARGV: the member, the cap, the lease (ms). Scores are
# the leases' ends on Redis's clock, so the hosts' own clocks never matter.
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZCARD', KEYS[1])
if held >= tonumber(ARGV[2]) then
  return {0, held}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
redis.call('PEXPIRE', KEYS[1], lease)
return {1, held + 1}
"""

# KEYS: the clients' sorted sets; ARGV: the lease (ms), then each key's member. A slot whose
# lease lapsed (its process stalled) is added again: its session is still open.
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + lease, ARGV[i + 1])
  redis.call('PEXPIRE', key, lease)
end
return #KEYS
"""

_HELD = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
"""


class RedisSlotLedger:
    """The open slots of every process of every host, in Redis: per client a sorted set
    (``<prefix><client>``) of ``<process>:<slot id>`` scored by the end of its lease.

    A thread renews this process's slots every third of the lease while it holds any (and
    ends when it holds none); a key vanishes a lease after its last slot was written."""

    def __init__(
        self, url: str, *, lease_seconds: float, prefix: str = "tau2:slots:", timeout: float = 5.0
    ) -> None:
        self.process = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.lease_ms = max(1, round(lease_seconds * 1000))
        self.prefix = prefix
        self._redis = redis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        self._claim = self._redis.register_script(_CLAIM)
        self._renew = self._redis.register_script(_RENEW)
        self._held_script = self._redis.register_script(_HELD)
        self._held: dict[int, str] = {}  # this process's slots: id → the client's key
        self._lock = threading.Lock()  # the slots above and their renewal
        self._renewer: threading.Thread | None = None
        self._closed = threading.Event()

    def _key(self, client: str) -> str:
        return f"{self.prefix}{client}"

    def _member(self, slot_id: int) -> str:
        return f"{self.process}:{slot_id}"

    def claim(self, slot: Slot, *, cap: int) -> tuple[bool, int]:
        key = self._key(slot.client)
        with self._lock, _unavailable_on_error():
            granted, held = self._claim(
                keys=[key], args=[self._member(slot.id), cap, self.lease_ms]
            )
            if granted:
                self._held[slot.id] = key
                self._start_renewing()
        return bool(granted), int(held)

    def release(self, slot: Slot) -> None:
        with self._lock:
            key = self._held.pop(slot.id, None)
            if key is None:
                return
            try:
                self._redis.zrem(key, self._member(slot.id))
            except redis.RedisError:
                # Its lease frees it.
                logger.warning("Releasing session slot %s in the shared ledger failed", slot.id)

    def held(self, client: str) -> int:
        with _unavailable_on_error():
            return int(self._held_script(keys=[self._key(client)]))

    def renew(self) -> int:
        """Renew the leases of this process's slots now; returns how many it holds."""
        with self._lock:
            if self._held:
                keys = list(self._held.values())
                members = [self._member(slot_id) for slot_id in self._held]
                self._renew(keys=keys, args=[self.lease_ms, *members])
            return len(self._held)

    def close(self) -> None:
        """Stop renewing and remove this process's slots from the ledger."""
        self._closed.set()
        with self._lock:
            held, self._held = self._held, {}
            with contextlib.suppress(redis.RedisError):
                for slot_id, key in held.items():
                    self._redis.zrem(key, self._member(slot_id))

    def _start_renewing(self) -> None:
        # Called with the lock held.
        if self._renewer is None and not self._closed.is_set():
            self._renewer = threading.Thread(
                target=self._renew_while_held, name="tau2-slots-lease", daemon=True
            )
            self._renewer.start()

    def _renew_while_held(self) -> None:
        while not self._closed.wait(self.lease_ms / 3000):
            with self._lock:
                if not self._held:
                    self._renewer = None
                    return
            try:
                self.renew()
            except redis.RedisError:
                logger.warning("Renewing the session slots' leases failed", exc_info=True)
        with self._lock:
            self._renewer = None


@contextlib.contextmanager
def _unavailable_on_error() -> Iterator[None]:
    try:
        yield
    except redis.RedisError as exc:
        logger.warning("The shared ledger of session slots cannot be reached: %s", exc)
        raise LedgerUnavailable(str(exc)) from exc


# ---------------------------------------------------------------- SQLite: one host


class FileSlotLedger:
    """The open slots of every process of one router, in one SQLite file; a process's
    slots count while its pid lives."""

    def __init__(self, path: str) -> None:
        self.process = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.pid = os.getpid()
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS slots (process TEXT NOT NULL, pid INTEGER NOT NULL,"
                " id INTEGER NOT NULL, client TEXT NOT NULL, PRIMARY KEY (process, id))"
            )
            self._db.execute("CREATE INDEX IF NOT EXISTS slots_client ON slots (client)")

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """The ledger's write lock, across processes and threads, for the block."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def claim(self, slot: Slot, *, cap: int) -> tuple[bool, int]:
        with self._exclusive():
            held = self._live(slot.client)
            if held >= cap:
                return False, held
            self._db.execute(
                "INSERT OR REPLACE INTO slots (process, pid, id, client) VALUES (?, ?, ?, ?)",
                (self.process, self.pid, slot.id, slot.client),
            )
            return True, held + 1

    def release(self, slot: Slot) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM slots WHERE process = ? AND id = ?", (self.process, slot.id)
            )

    def held(self, client: str) -> int:
        with self._exclusive():
            return self._live(client)

    def _live(self, client: str) -> int:
        """``client``'s slots, once the dead processes' rows are dropped (within
        :meth:`_exclusive`)."""
        others = self._db.execute(
            "SELECT DISTINCT process, pid FROM slots WHERE process != ?", (self.process,)
        ).fetchall()
        for process, pid in others:
            if not _alive(pid):
                self._db.execute("DELETE FROM slots WHERE process = ?", (process,))
        (count,) = self._db.execute(
            "SELECT count(*) FROM slots WHERE client = ?", (client,)
        ).fetchone()
        return int(count)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ---------------------------------------------------------------- settings


def ledger_from_config() -> SlotLedger | None:
    """The Redis ledger of ``TAU2_SLOTS_URL`` (every host), else the SQLite file of
    ``TAU2_SLOTS_LEDGER`` (the processes of one router), else none."""
    url = config.slots_url()
    if url:
        return RedisSlotLedger(url, lease_seconds=config.slots_lease_seconds())
    path = config.env_value(LEDGER_VARIABLE)
    return FileSlotLedger(path) if path else None


def session_slots_from_config() -> SessionSlots:
    """The server's slots: counted in :func:`ledger_from_config`'s ledger when there is
    one, else this process's own."""
    ledger = ledger_from_config()
    if ledger is None:
        return SessionSlots.from_config()
    return SharedSessionSlots.from_config(ledger)

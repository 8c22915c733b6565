"""Session caps that hold across the processes of one server.

:mod:`tau2_env.gate.session_router` runs several OpenEnv processes behind one port, and spreads one
client's sessions over all of them. A client's cap (a person's, a studio key's own) must
count its sessions on every process, so the processes share a ledger of open sessions: a
SQLite file named by ``TAU2_SLOTS_LEDGER`` (the router sets it for the processes it
starts). :class:`SharedSessionSlots` is :class:`~tau2_env.gate.capacity.SessionSlots` whose
``acquire`` holds the ledger's write lock while it decides — so two processes never both
grant a client's last slot — and counts, besides its own, the client's slots held by the
other live processes (:meth:`~tau2_env.gate.capacity.SessionSlots.held_elsewhere`); each slot
granted or released is written there. A process that dies leaves rows behind: they stop
counting once its pid is gone. ``MAX_CONCURRENT_ENVS`` (the total) stays per process:
it is what one process's thread pool and memory hold.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator

from tau2_env import config
from tau2_env.gate.capacity import SessionSlots, Slot

__all__ = ["LEDGER_VARIABLE", "SharedSessionSlots", "SlotLedger", "session_slots_from_config"]

LEDGER_VARIABLE = "TAU2_SLOTS_LEDGER"


class SlotLedger:
    """The open slots of every process of a server, in one SQLite file."""

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
    def exclusive(self) -> Iterator[None]:
        """The ledger's write lock, across processes and threads, for the block."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def held_elsewhere(self, client: str) -> int:
        """``client``'s slots held by the other live processes (the dead ones' rows are
        dropped first). Call within :meth:`exclusive`."""
        with self._lock:
            others = self._db.execute(
                "SELECT DISTINCT process, pid FROM slots WHERE process != ?", (self.process,)
            ).fetchall()
            for process, pid in others:
                if not _alive(pid):
                    self._db.execute("DELETE FROM slots WHERE process = ?", (process,))
            (count,) = self._db.execute(
                "SELECT count(*) FROM slots WHERE client = ? AND process != ?",
                (client, self.process),
            ).fetchone()
            return int(count)

    def add(self, slot: Slot) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO slots (process, pid, id, client) VALUES (?, ?, ?, ?)",
                (self.process, self.pid, slot.id, slot.client),
            )

    def remove(self, slot: Slot) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM slots WHERE process = ? AND id = ?", (self.process, slot.id)
            )

    def count(self) -> int:
        """All slots in the ledger (every process's, dead ones' included)."""
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM slots").fetchone()[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SharedSessionSlots(SessionSlots):
    """:class:`~tau2_env.gate.capacity.SessionSlots` whose caps count every process's slots
    (see the module docstring)."""

    def __init__(self, *, ledger: SlotLedger | str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.ledger = ledger if isinstance(ledger, SlotLedger) else SlotLedger(ledger)

    @classmethod
    def from_config(cls, ledger: str | None = None) -> SharedSessionSlots:
        """:meth:`SessionSlots.from_config` on the ledger ``ledger`` (default:
        ``TAU2_SLOTS_LEDGER``)."""
        plain = SessionSlots.from_config()
        names = inspect.signature(SessionSlots.__init__).parameters
        settings = {n: getattr(plain, n) for n in names if n != "clock" and hasattr(plain, n)}
        return cls(ledger=ledger or config.env_value(LEDGER_VARIABLE) or "", **settings)

    def held_elsewhere(self, client: str) -> int:
        return self.ledger.held_elsewhere(client)

    def acquire(self, client: str, **kwargs) -> Slot:
        with self.ledger.exclusive():
            slot = super().acquire(client, **kwargs)
            self.ledger.add(slot)
        return slot

    def release(self, slot: Slot | None) -> None:
        super().release(slot)
        if slot is not None:
            self.ledger.remove(slot)


def session_slots_from_config() -> SessionSlots:
    """The server's slots: shared with the other processes when ``TAU2_SLOTS_LEDGER``
    names a ledger (the router's processes), else this process's own."""
    if config.env_value(LEDGER_VARIABLE):
        return SharedSessionSlots.from_config()
    return SessionSlots.from_config()

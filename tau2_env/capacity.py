"""Session slots shared by the agent faces: a total, a per-client cap, an idle time.

Every open OpenEnv session (a ``/ws`` connection, an ``openenv/session/create`` over
HTTP) and every MCP session holds one :class:`Slot` of one :class:`SessionSlots`. A
client (see :class:`tau2_env.access.Credentials`: per token or key, else per address)
holds at most ``per_client`` of them, so one client cannot take every slot; the faces
close a session idle for ``idle_seconds``, so an abandoned one frees its slot.
A refusal (:class:`CapacityReached`) says when to retry: when the first slot that
could free up goes idle, if its client does nothing more.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tau2_env import config

__all__ = ["CapacityReached", "SessionSlots", "Slot"]


class CapacityReached(Exception):
    """No slot for this client now; ``retry_after`` is in seconds (at least 1)."""

    def __init__(self, message: str, *, retry_after: int, active: int, limit: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.active = active
        self.limit = limit

    def details(self) -> dict[str, object]:
        """The refusal as JSON fields: ``code``, ``message``, ``retry_after`` and counts."""
        return {
            "code": "CAPACITY_REACHED",
            "message": str(self),
            "retry_after": self.retry_after,
            "active_sessions": self.active,
            "max_sessions": self.limit,
        }


@dataclass(eq=False)
class Slot:
    """One open session of ``client``; ``last_active`` is on the slots' clock."""

    client: str
    last_active: float
    id: int = field(default=0)


class SessionSlots:
    """Thread-safe slot accounting (``acquire`` / ``touch`` / ``release``)."""

    def __init__(
        self,
        *,
        total: int,
        per_client: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.per_client = per_client
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._slots: set[Slot] = set()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls) -> SessionSlots:
        """``MAX_CONCURRENT_ENVS`` slots, ``TAU2_SESSIONS_PER_CLIENT`` per client,
        ``TAU2_SESSION_IDLE_SECONDS`` of idleness before a session is closed."""
        return cls(
            total=config.max_concurrent_envs(),
            per_client=config.sessions_per_client(),
            idle_seconds=config.session_idle_seconds(),
        )

    @property
    def active(self) -> int:
        return len(self._slots)

    def acquire(self, client: str) -> Slot:
        """A slot for ``client``; raises :class:`CapacityReached` when the server or the
        client is full."""
        with self._lock:
            now = self._clock()
            mine = [slot for slot in self._slots if slot.client == client]
            if len(mine) >= self.per_client:
                raise CapacityReached(
                    f"CAPACITY_REACHED: this client already has {len(mine)} open sessions "
                    f"(at most {self.per_client}); close one or retry in "
                    f"{self._retry_after(mine, now)} s.",
                    retry_after=self._retry_after(mine, now),
                    active=len(mine),
                    limit=self.per_client,
                )
            if len(self._slots) >= self.total:
                wait = self._retry_after(self._slots, now)
                raise CapacityReached(
                    f"CAPACITY_REACHED: all {self.total} sessions are in use; retry in {wait} s.",
                    retry_after=wait,
                    active=len(self._slots),
                    limit=self.total,
                )
            slot = Slot(client=client, last_active=now, id=next(self._ids))
            self._slots.add(slot)
            return slot

    def now(self) -> float:
        """The slots' clock (``last_active`` is on it)."""
        return self._clock()

    def touch(self, slot: Slot) -> None:
        """The session did something: its idle time starts again."""
        slot.last_active = self._clock()

    def release(self, slot: Slot | None) -> None:
        """Free ``slot`` (idempotent; ``None`` is ignored)."""
        if slot is None:
            return
        with self._lock:
            self._slots.discard(slot)

    def _retry_after(self, slots, now: float) -> int:
        soonest = min((slot.last_active + self.idle_seconds for slot in slots), default=now + 1)
        return max(1, math.ceil(soonest - now))

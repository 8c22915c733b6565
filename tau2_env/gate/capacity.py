"""Session slots shared by the agent faces: a total, a cap per client, an idle time, and
credentials checked again while sessions are open.

Every open OpenEnv session (a ``/ws`` connection, an ``openenv/session/create`` over
HTTP) and every MCP session holds one :class:`Slot` of one :class:`SessionSlots`. A
client (see :class:`tau2_env.gate.access.Credentials`: a person with all their keys and
browser sessions, a Hugging Face account, else an address) holds at most its cap of
them, below the total, so one client cannot take every slot — a studio key made with a
cap of its own (a trainer's key, say) is a client by itself holding up to that cap, at
most ``per_key_max``; the faces close a session
idle for ``idle_seconds``, so an abandoned one frees its slot. A refusal
(:class:`CapacityReached`) names the cap that was hit and says when to retry: when the
first slot that could free up goes idle, if its client does nothing more.

A slot may carry its credentials' ``check`` (is the key still live, the person still
signed in?): :meth:`SessionSlots.watch` asks every open slot's again every few seconds
and ends the sessions of those refused (:meth:`Slot.end`), with the reason.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tau2_env import config
from tau2_env.gate import access

__all__ = ["CapacityReached", "SessionSlots", "Slot"]

logger = logging.getLogger(__name__)

# What a client's cap is, by the kind of client (the prefix of ``Credentials.client``).
_WHO = {
    "person": ("you", "per person: all your keys and browser sessions together"),
    "key": ("this API key", "for this key, as set when it was made"),
    "hf": ("this Hugging Face account", "per Hugging Face account"),
    "address": ("this address", "per address for clients without a key"),
}


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
    """One open session of ``client`` (its cap group), belonging to ``owner`` (the
    credential that opened it; only that credential may use the session);
    ``last_active`` is on the slots' clock.

    ``check`` asks the owner's credentials again (raises to refuse them); ``on_end``,
    set by the face serving the session, closes it; :meth:`end` does both's work."""

    client: str
    last_active: float
    id: int = field(default=0)
    owner: str = ""
    check: Callable[[], None] | None = field(default=None, repr=False)
    on_end: Callable[[str], Awaitable[None]] | None = field(default=None, repr=False)
    ended: str | None = None  # why the server ended the session, once it did
    _ended_event: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    async def end(self, reason: str) -> None:
        """End the session for ``reason`` (said to its client): the face's ``on_end``
        closes it; :meth:`wait_ended` returns. Idempotent."""
        if self.ended is not None:
            return
        self.ended = reason
        self._ended_event.set()
        if self.on_end is not None:
            try:
                await self.on_end(reason)
            except Exception:
                logger.exception("Ending session slot %s failed", self.id)

    async def wait_ended(self) -> str:
        """Wait until :meth:`end` is called; returns its reason."""
        await self._ended_event.wait()
        return self.ended or ""


class SessionSlots:
    """Thread-safe slot accounting (``acquire`` / ``touch`` / ``release``)."""

    def __init__(
        self,
        *,
        total: int,
        per_client: int,
        idle_seconds: float,
        per_key_max: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.per_client = per_client
        self.per_key_max = per_key_max if per_key_max is not None else total
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._slots: set[Slot] = set()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls) -> SessionSlots:
        """``MAX_CONCURRENT_ENVS`` slots, ``TAU2_SESSIONS_PER_CLIENT`` per client (a
        credential's own limit up to ``TAU2_SESSIONS_PER_KEY_MAX``),
        ``TAU2_SESSION_IDLE_SECONDS`` of idleness before a session is closed."""
        return cls(
            total=config.max_concurrent_envs(),
            per_client=config.sessions_per_client(),
            per_key_max=config.sessions_per_key_max(),
            idle_seconds=config.session_idle_seconds(),
        )

    @property
    def active(self) -> int:
        return len(self._slots)

    def acquire(
        self,
        client: str,
        *,
        limit: int | None = None,
        owner: str = "",
        check: Callable[[], None] | None = None,
    ) -> Slot:
        """A slot for ``client`` (at most ``limit`` of them — its credentials' own cap,
        up to ``per_key_max`` — or ``per_client`` without one; never more than the
        total), belonging to ``owner`` (default: ``client``); raises
        :class:`CapacityReached` (with ``retry_after``) when the server or the client is
        full."""
        cap = self.cap_for(limit)
        with self._lock:
            now = self._clock()
            mine = [slot for slot in self._slots if slot.client == client]
            if len(mine) >= cap:
                raise self._client_full(client, held=len(mine), cap=cap, mine=mine, now=now)
            if len(self._slots) >= self.total:
                wait = self._retry_after(self._slots, now)
                raise CapacityReached(
                    f"CAPACITY_REACHED: all {self.total} sessions are in use; retry in {wait} s.",
                    retry_after=wait,
                    active=len(self._slots),
                    limit=self.total,
                )
            slot = Slot(
                client=client,
                last_active=now,
                id=next(self._ids),
                owner=owner or client,
                check=check,
            )
            self._slots.add(slot)
            return slot

    def cap_for(self, limit: int | None) -> int:
        """The most slots a client may hold: its credentials' own ``limit`` (up to
        ``per_key_max``), else ``per_client``; never more than the total."""
        cap = min(limit, self.per_key_max) if limit else self.per_client
        return min(cap, self.total)

    def client_full(self, client: str, *, held: int, cap: int) -> CapacityReached:
        """The refusal of one more slot to ``client``, which holds ``held`` of its
        ``cap`` (counted on every process: see
        :class:`tau2_env.gate.shared_slots.SharedSessionSlots`)."""
        with self._lock:
            mine = [slot for slot in self._slots if slot.client == client]
            return self._client_full(client, held=held, cap=cap, mine=mine, now=self._clock())

    def _client_full(
        self, client: str, *, held: int, cap: int, mine: list[Slot], now: float
    ) -> CapacityReached:
        who, per = _WHO.get(client.partition(":")[0], ("this client", "per client"))
        wait = self._retry_after(mine, now)
        return CapacityReached(
            f"CAPACITY_REACHED: {who} already {'have' if who == 'you' else 'has'} "
            f"{held} open sessions (at most {cap} {per}); close one or retry in {wait} s.",
            retry_after=wait,
            active=held,
            limit=cap,
        )

    async def end_refused(self) -> int:
        """Ask every open slot's credentials again (off the event loop, once per owner)
        and end the sessions of those refused; returns how many were ended."""
        with self._lock:
            slots = [s for s in self._slots if s.check is not None and s.ended is None]
        checks: dict[str, Callable[[], None]] = {}
        for slot in slots:
            checks.setdefault(slot.owner, slot.check)  # type: ignore[arg-type]
        if not checks:
            return 0
        refused = await access.in_credentials_pool(_refusals, checks)
        ended = 0
        for slot in slots:
            if slot.owner in refused:
                await slot.end(refused[slot.owner])
                ended += 1
        return ended

    async def watch(self, *, interval: float) -> None:
        """:meth:`end_refused` every ``interval`` seconds, for ever (a task of the
        serving loop: cancel it to stop)."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.end_refused()
            except Exception:
                logger.exception("Checking the open sessions' credentials failed")

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


def _refusals(checks: dict[str, Callable[[], None]]) -> dict[str, str]:
    """The owners whose ``check`` refuses them (raises ``CredentialsRefused``), with the
    reason. A check that fails otherwise (the database away, say) refuses nobody."""
    refused = {}
    for owner, check in checks.items():
        try:
            check()
        except access.CredentialsRefused as exc:
            refused[owner] = str(exc) or "These credentials are no longer accepted."
        except Exception:
            logger.exception("A credentials check failed")
    return refused

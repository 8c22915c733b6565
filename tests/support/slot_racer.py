"""One process racing others for a client's last session slot, for
``tests/tau2_env/test_slots_across_hosts.py`` (started with multiprocessing's spawn: it
imports nothing of Django).

Each round, every racer waits at the barrier, then asks its own
:class:`~tau2_env.gate.shared_slots.SharedSessionSlots` for a slot of that round's client and
reports ``(round, granted)``; it keeps what it was granted until ``done`` is set, so its
slots count (a SQLite ledger counts a process's slots while its pid lives).
"""

from __future__ import annotations

from tau2_env.gate.capacity import CapacityReached
from tau2_env.gate.shared_slots import (
    FileSlotLedger,
    RedisSlotLedger,
    SharedSessionSlots,
    SlotLedger,
)

__all__ = ["ledger", "race"]


def ledger(kind: str, where: str) -> SlotLedger:
    """The ledger of ``kind`` (``redis``: ``where`` is its URL; ``sqlite``: its file)."""
    if kind == "redis":
        return RedisSlotLedger(where, lease_seconds=30)
    return FileSlotLedger(where)


def race(kind: str, where: str, clients: list[str], cap: int, barrier, results, done) -> None:
    slots = SharedSessionSlots(
        ledger=ledger(kind, where), total=len(clients) + 1, per_client=cap, idle_seconds=300
    )
    held = []
    for round_, client in enumerate(clients):
        barrier.wait(timeout=60)
        try:
            held.append(slots.acquire(client))
        except CapacityReached:
            results.put((round_, False))
        else:
            results.put((round_, True))
    done.wait(timeout=120)
    for slot in held:
        slots.release(slot)

"""People and helpers for play tests: alice plays, bob is on her team, charlie is anonymous.

Every LLM request of a play session is the customer's (or the judge's): the person is
the agent. The scripted LLM answers them in order.
"""

from __future__ import annotations

from tests.support.llm_server import ScriptedLLM, error, text

__all__ = ["customer_says", "error", "text"]


def customer_says(llm: ScriptedLLM, *replies) -> list:
    """Script the customer's replies, in order; returns the queue (what is left of it)."""
    queue = [text(r) if isinstance(r, str) else r for r in replies]

    def responder(request):
        return queue.pop(0) if queue else error(500, "scripted customer: no reply left")

    llm.responder = responder
    return queue

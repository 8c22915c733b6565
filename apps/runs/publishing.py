"""Publishing to the channel layer from synchronous code, on one long-lived event loop.

Workers' threads and the agent recorders publish every stored message to the live pages.
``async_to_sync(layer.group_send)`` from a thread without a loop runs each call on a new
event loop, and channels_redis keeps its Redis connections per loop: every message opened
a connection to Redis, and closed it (about 4 ms of CPU per message, more than storing
it). Here one daemon thread per process runs one loop for every such call, so the
layer's connections are kept; a caller waits for its message to be sent (so a thread's
messages go out in order, as before) and gets the layer's exception if it failed.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from channels.layers import get_channel_layer

__all__ = ["SEND_TIMEOUT_S", "group_send"]

# Longer than channels_redis takes to give up on a Redis that went away.
SEND_TIMEOUT_S = 30.0


class _Loop:
    """The publishing loop of this process (started again after a fork)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            alive = self._thread is not None and self._thread.is_alive()
            if self._loop is None or not alive or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="channel-layer-publisher", daemon=True
                )
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop


_publisher = _Loop()


def group_send(group: str, message: dict[str, Any]) -> None:
    """``layer.group_send(group, message)`` from synchronous code; raises what the layer
    raised (or ``TimeoutError``). Must not be called from the publishing loop itself."""
    layer = get_channel_layer()
    if layer is None:  # pragma: no cover - every setup configures one
        return
    future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), _publisher.get())
    future.result(timeout=SEND_TIMEOUT_S)

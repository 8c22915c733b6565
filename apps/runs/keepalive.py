"""The live sockets' keepalive: one mechanism for every consumer whose page runs a watchdog.

A live page (``static/js/live_socket.js``, ``watchdog: true``) closes and reopens a socket
that said nothing for 30 s, in case it missed a message. A socket whose run waits 60 s for
a model call, or whose evaluation had nothing new for a while, is quiet but healthy: its
consumer speaks every ``KEEPALIVE_SECONDS`` (15 s) instead, so a healthy page never
reconnects and a proxy's idle timeout never cuts it.

Each tick is also the consumer's chance to catch what a message lost while Redis was busy
would have brought (the watchdog's old job): :meth:`Keepalive.keepalive_tick` checks the
state itself and sends what changed, or ``{"type": "keepalive"}`` when nothing did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

logger = logging.getLogger(__name__)

KEEPALIVE = {"type": "keepalive"}


class Keepalive:
    """Mixed into an ``AsyncJsonWebsocketConsumer``: :meth:`keepalive_start` once the
    socket is accepted and has sent its first state, :meth:`keepalive_stop` in
    ``disconnect``. Every ``KEEPALIVE_SECONDS`` the loop awaits :meth:`keepalive_tick`,
    and ends once a tick returns False (the run or evaluation needs no more)."""

    KEEPALIVE_SECONDS: float = 15.0
    _keepalive: asyncio.Future | None = None

    async def keepalive_tick(self) -> bool:
        """Send what changed since the last frame, or :meth:`send_keepalive`; return
        whether the socket still needs ticks."""
        raise NotImplementedError

    async def send_keepalive(self) -> None:
        await self.send_json(KEEPALIVE)  # type: ignore[attr-defined]

    def keepalive_start(self) -> None:
        """Start the ticks, unless they are going (again after they ended: a final run
        or evaluation tried again is live again)."""
        if self._keepalive is None or self._keepalive.done():
            self._keepalive = asyncio.ensure_future(self._keep_alive())

    async def keepalive_stop(self) -> None:
        task, self._keepalive = self._keepalive, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _keep_alive(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.KEEPALIVE_SECONDS)
                if not await self.keepalive_tick():
                    return
        except OSError:
            return  # the client left between two ticks (uvicorn's ClientDisconnected)
        except Exception:
            # The database is gone, say: the page's watchdog reopens the socket, and its
            # connect says what is wrong (1013) until the database is back.
            logger.warning("A live socket stopped its keepalives", exc_info=True)

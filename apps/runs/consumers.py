"""The live run page's WebSocket: ``/ws/runs/<id>/?after=<last seq seen>``."""

from __future__ import annotations

from functools import partial

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.access import can_view_runs
from apps.runs import presenters
from apps.runs.events import group_name
from apps.runs.models import Run
from apps.runs.selectors import run_events

# Reads (and template rendering) for many open pages at once: off Django's one shared sync
# thread (thread_sensitive=True would queue every page's every event behind each other).
read_in_pool = partial(database_sync_to_async, thread_sensitive=False)


class RunConsumer(AsyncJsonWebsocketConsumer):
    """Sends a run's events after ``after``, then each new one once, in order.

    The consumer joins the run's group *before* reading stored events, and drops any
    live event whose ``seq`` it has already sent: no gap, no duplicate.
    """

    async def connect(self):
        self.run_id = int(self.scope["url_route"]["kwargs"]["pk"])
        if not await self._allowed():
            await self.close(code=4403)
            return
        self.group = group_name(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.last_seq = self._after()
        await self._send_new_events()
        await self._send_status()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, message):
        """New events were stored (``seq`` is the batch's last): send them, then the
        status line, whose counters changed with them."""
        if message["seq"] > self.last_seq:
            await self._send_new_events()
            await self._send_status()

    async def run_status(self, message):
        await self._send_status()

    def _after(self) -> int:
        from urllib.parse import parse_qs

        query = parse_qs(self.scope.get("query_string", b"").decode())
        try:
            return int(query.get("after", ["-1"])[0])
        except ValueError:
            return -1

    @read_in_pool
    def _allowed(self) -> bool:
        return can_view_runs(self.scope.get("user")) and Run.objects.filter(pk=self.run_id).exists()

    @read_in_pool
    def _new_events(self) -> list[tuple[int, str]]:
        return [
            (event.seq, presenters.event_html(event))
            for event in run_events(run_id=self.run_id, after=self.last_seq)
        ]

    async def _send_new_events(self):
        for seq, html in await self._new_events():
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            await self.send_json({"type": "event", "seq": seq, "html": html})

    @read_in_pool
    def _status(self) -> dict:
        run = Run.objects.select_related("task", "created_by").get(pk=self.run_id)
        return {
            "type": "status",
            "status": run.status,
            "final": run.is_final,
            "html": presenters.status_html(run, user=self.scope.get("user")),
        }

    async def _send_status(self):
        await self.send_json(await self._status())

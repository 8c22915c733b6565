"""The live run page's WebSocket: ``/ws/runs/<id>/?after=<last seq seen>[&menu=1]``.

The run page asks for ``menu=1``: each message then comes as that page renders it, with its
menu (``presenters.message_menu``); the play and race pages ask for the message alone."""

from __future__ import annotations

import asyncio
from functools import partial
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db.models import OuterRef, Subquery

from apps.accounts.access import can_view_runs
from apps.runs import presenters
from apps.runs.current_call import call_current
from apps.runs.events import group_name
from apps.runs.keepalive import Keepalive
from apps.runs.models import Run, RunEvent
from apps.runs.selectors import run_events

# Reads (and template rendering) for many open pages at once: off Django's one shared sync
# thread (thread_sensitive=True would queue every page's every event behind each other).
read_in_pool = partial(database_sync_to_async, thread_sensitive=False)


class RunConsumer(Keepalive, AsyncJsonWebsocketConsumer):
    """Sends a run's events after ``after``, then each new one once, in order, each followed
    by the status line.

    The consumer joins the run's group *before* reading stored events, and drops any
    live event whose ``seq`` it has already sent: no gap, no duplicate. A final status
    never comes ahead of an event stored before the run ended (:meth:`_read`): a page that
    closes its socket on the final status has everything. A status message sends any event
    not sent yet too, so one lost ``run.event`` is made good by the next status (the final
    one at the latest).

    While the run is live it speaks at least every ``KEEPALIVE_SECONDS``
    (``apps.runs.keepalive``): a model call of 60 s leaves the run, race and play pages'
    30 s watchdog nothing to trip on. Each tick checks the run's status and last stored
    ``seq`` and catches up when either moved (a message lost while Redis was busy), else
    sends ``{"type": "keepalive"}``; once the final status is sent, ticks stop.
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
        # The run page's messages carry their menu (?menu=1); the play page's do not.
        self.with_menu = self._query("menu", "") == "1"
        # The run page asks for its calls' passing line (?calls=1); other readers of the
        # socket (play, races, scripts) get events and statuses only, as before.
        self.with_calls = self._query("calls", "") == "1"
        self.sent_status: str | None = None
        self.final_sent = False
        self.current_sent: tuple | None = None  # the kept call notice sent on connect
        # One catch-up at a time: a keepalive tick's and a group message's reads would
        # otherwise interleave, and an older status could follow a newer one.
        self.catching_up = asyncio.Lock()
        await self._catch_up()
        await self._send_current_call()

    async def disconnect(self, code):
        await self.keepalive_stop()
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_event(self, message):
        """New events were stored (``seq`` is the batch's last): send them, then the
        status line, whose counters changed with them."""
        if message["seq"] > self.last_seq:
            await self._catch_up()

    async def run_status(self, message):
        await self._catch_up()

    async def run_call(self, message):
        """One of the run's LLM calls started or ended: passed on as it came, but for the
        live copy of the notice :meth:`_send_current_call` already sent (it arrived while
        the socket connected: the group was joined before the record was read)."""
        if not self.with_calls:
            return
        if _call_key(message) == self.current_sent:
            self.current_sent = None
            return
        self.current_sent = None
        await self.send_json(_call_frame(message))

    async def _send_current_call(self):
        """A page opened mid-call hears of the call under way at once (its ``seconds``
        brought up to now), not at its next retry or answer (``apps.runs.current_call``).
        A live notice that came meanwhile follows it: the group was joined first."""
        if not self.with_calls or self.final_sent:
            return
        current = await read_in_pool(call_current)(run_id=self.run_id)
        if current is not None:
            self.current_sent = _call_key(current)
            await self.send_json(_call_frame(current))

    async def keepalive_tick(self) -> bool:
        head = await self._head()
        if head is None:  # deleted meanwhile
            await self.close(code=4404)
            return False
        status, last_seq = head
        if status != self.sent_status or (last_seq is not None and last_seq > self.last_seq):
            await self._catch_up()
        elif not self.final_sent:
            await self.send_keepalive()
        return not self.final_sent

    def _query(self, name: str, default: str) -> str:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        return query.get(name, [default])[0]

    def _after(self) -> int:
        try:
            return int(self._query("after", "-1"))
        except ValueError:
            return -1

    @read_in_pool
    def _allowed(self) -> bool:
        return can_view_runs(self.scope.get("user")) and Run.objects.filter(pk=self.run_id).exists()

    @read_in_pool
    def _head(self) -> tuple[str, int | None] | None:
        """The run's status and its last stored event's ``seq`` (one query on two indexes),
        or None once the run is gone."""
        last = RunEvent.objects.filter(run_id=OuterRef("pk")).order_by("-seq").values("seq")[:1]
        rows = Run.objects.filter(pk=self.run_id).annotate(last_seq=Subquery(last))
        return rows.values_list("status", "last_seq").first()

    @read_in_pool
    def _read(self) -> tuple[list[tuple[int, str]], dict]:
        """The events after the last one sent (as the run page renders each, with its menu),
        and the status frame: its counters count at least those events, and a final one
        comes with every event (read again after it: the worker stores its last events,
        then ends the run)."""
        user = self.scope.get("user")
        events = list(run_events(run_id=self.run_id, after=self.last_seq))
        run = Run.objects.select_related("task", "created_by").get(pk=self.run_id)
        if run.is_final:
            after = events[-1].seq if events else self.last_seq
            events += run_events(run_id=self.run_id, after=after)
        status = {
            "type": "status",
            "status": run.status,
            "final": run.is_final,
            "html": presenters.status_html(run, user=user),
        }
        for event in events:
            event.run = run  # read once, as the status was
        menu = presenters.message_menu(run=run, user=user) if events and self.with_menu else None
        return [(event.seq, presenters.event_html(event, menu=menu)) for event in events], status

    async def _catch_up(self):
        async with self.catching_up:
            await self._send_news()

    async def _send_news(self):
        events, status = await self._read()
        for seq, html in events:
            if seq <= self.last_seq:
                continue
            self.last_seq = seq
            await self.send_json({"type": "event", "seq": seq, "html": html})
        self.sent_status, self.final_sent = status["status"], status["final"]
        await self.send_json(status)
        if not self.final_sent:
            self.keepalive_start()  # from connect on, and again for a run tried again


_CALL_KEYS = ("side", "phase", "seconds", "timeout", "attempt", "attempts", "reason", "wait")


def _call_key(message: dict) -> tuple:
    """What tells one notice of a call from another (not its ``seconds``, brought up to
    now when a kept notice is sent)."""
    return tuple(message.get(key) for key in ("side", "phase", "attempt", "attempts", "reason"))


def _call_frame(message: dict) -> dict:
    """A ``run.call`` message (live, or kept for the run) as the page's ``call`` frame."""
    return {"type": "call", **{key: message[key] for key in _CALL_KEYS if key in message}}

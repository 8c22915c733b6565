"""The live evaluation page's WebSocket: ``/ws/evaluations/<id>/?version=<n>``."""

from __future__ import annotations

from functools import partial

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.access import can_view_runs
from apps.evaluations import presenters
from apps.evaluations.events import group_name
from apps.evaluations.models import Evaluation
from apps.runs.keepalive import Keepalive

# Off Django's one shared sync thread, as the run page's consumer (many pages at once).
read_in_pool = partial(database_sync_to_async, thread_sensitive=False)


class EvaluationConsumer(Keepalive, AsyncJsonWebsocketConsumer):
    """Sends the evaluation's state on connect, then again whenever it changed.

    It joins the evaluation's group *before* reading the state, so nothing that happens
    after the read goes unannounced. Each ``evaluation.update`` reads the state again and
    sends it when anything the page shows changed — a run finishing, but also one
    dispatched or taken by a worker, a pause, a resume or a retry, which leave the
    version (final runs) as it was or lower it — and nothing for a late or repeated
    message. The matrix goes whole on connect, then as the cells that changed (``patch``).

    ``?version=`` is the page's version; the state on connect is sent whole whatever it
    is (a retry can move the version down and up again to the same number with other
    cells), so a page coming back resumes without a gap.

    Every ``KEEPALIVE_SECONDS`` it checks the state itself (a message lost while Redis
    was busy is caught here, not by the page reopening its socket) and, when nothing
    changed, sends ``{"type": "keepalive"}``: a page's watchdog (30 s) and a proxy's idle
    timeout never see a quiet socket, so a healthy page never reconnects
    (``apps.runs.keepalive``, shared with the run socket). Once the final state is sent,
    the ticks stop.
    """

    async def connect(self):
        self.evaluation_id = int(self.scope["url_route"]["kwargs"]["pk"])
        if not await self._allowed():
            await self.close(code=4403)
            return
        self.group = group_name(self.evaluation_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        self.cells: list | None = None
        self.head: dict | None = None
        self.sent_final = False
        await self._send_state()

    async def disconnect(self, code):
        await self.keepalive_stop()
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def keepalive_tick(self) -> bool:
        # A final evaluation needs no ticks (its page has closed the socket); a deleted one
        # ends here too. One tried again is announced, and its state starts them again.
        return await self._send_state(only_if_changed=True) and not self.sent_final

    async def evaluation_update(self, message):
        # Whatever the message's version: a run taken by a worker (queued → running) or
        # dispatched changes the counts but not the version. The state is read again
        # (cheap when nothing changed: ``presenters.evaluation_state`` keeps it) and sent
        # when it differs from the one last sent, so the page always equals its reload.
        await self._send_state(only_if_changed=True, quiet=True)

    @read_in_pool
    def _allowed(self) -> bool:
        return (
            can_view_runs(self.scope.get("user"))
            and Evaluation.objects.filter(pk=self.evaluation_id).exists()
        )

    @read_in_pool
    def _state(self) -> dict | None:
        evaluation = Evaluation.objects.filter(pk=self.evaluation_id).first()
        return presenters.evaluation_state(evaluation).message() if evaluation else None

    async def _send_state(self, *, only_if_changed: bool = False, quiet: bool = False) -> bool:
        """Sends the state (``only_if_changed``: only if it differs from the one last
        sent, else a keepalive unless ``quiet``); False once the evaluation is gone."""
        state = await self._state()
        if state is None:  # deleted meanwhile
            await self.close(code=4404)
            return False
        head = {k: v for k, v in state.items() if k not in ("matrix", "charts")}
        if only_if_changed and head == self.head and state["matrix"]["cells"] == self.cells:
            if (
                not self.sent_final and not quiet
            ):  # (a tick that read while the final state went out)
                await self.send_keepalive()
            return True
        self.head = head
        cells = state["matrix"]["cells"]
        if self.cells is not None and len(self.cells) == len(cells):
            pairs = enumerate(zip(self.cells, cells, strict=True))
            state["patch"] = [[i, cell] for i, (old, cell) in pairs if old != cell]
            del state["matrix"]
        self.cells = cells
        self.sent_final = bool(state["final"])
        await self.send_json(state)
        if not self.sent_final:
            self.keepalive_start()
        return True

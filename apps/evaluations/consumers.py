"""The live evaluation page's WebSocket: ``/ws/evaluations/<id>/?version=<n>``."""

from __future__ import annotations

from functools import partial

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from apps.accounts.access import can_view_runs
from apps.evaluations import presenters
from apps.evaluations.events import evaluation_version, group_name
from apps.evaluations.models import Evaluation
from apps.runs.keepalive import Keepalive

# Off Django's one shared sync thread, as the run page's consumer (many pages at once).
read_in_pool = partial(database_sync_to_async, thread_sensitive=False)


class EvaluationConsumer(Keepalive, AsyncJsonWebsocketConsumer):
    """Sends the evaluation's state on connect, then again whenever it changed.

    It joins the evaluation's group *before* reading the state, so nothing that happens
    after the read goes unannounced. An ``evaluation.update`` whose ``version`` (final
    runs) is newer than the one last sent brings a refreshed state; one that is not newer
    is checked cheaply (status and version) and sends only if either changed — a pause,
    a resume or a retry changes the status but not, or not upwards, the version. The
    matrix goes whole on connect, then as the cells that changed (``patch``).

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
        self.sent: tuple[int, str] | None = None  # (version, status) last sent
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
        stale = self.sent is not None and message["version"] <= self.sent[0]
        if stale and await self._header() == self.sent:
            return  # nothing new since the state last sent (a late or repeated message)
        await self._send_state()

    @read_in_pool
    def _allowed(self) -> bool:
        return (
            can_view_runs(self.scope.get("user"))
            and Evaluation.objects.filter(pk=self.evaluation_id).exists()
        )

    @read_in_pool
    def _header(self) -> tuple[int, str] | None:
        status = (
            Evaluation.objects.filter(pk=self.evaluation_id)
            .values_list("status", flat=True)
            .first()
        )
        return (evaluation_version(self.evaluation_id), status)

    @read_in_pool
    def _state(self) -> dict | None:
        evaluation = Evaluation.objects.filter(pk=self.evaluation_id).first()
        return presenters.evaluation_state(evaluation).message() if evaluation else None

    async def _send_state(self, *, only_if_changed: bool = False) -> bool:
        """Sends the state (or only a keepalive); False once the evaluation is gone."""
        state = await self._state()
        if state is None:  # deleted meanwhile
            await self.close(code=4404)
            return False
        head = {k: v for k, v in state.items() if k not in ("matrix", "charts")}
        if only_if_changed and head == self.head:
            if not self.sent_final:  # (a tick that read while the final state went out)
                await self.send_keepalive()
            return True
        self.head = head
        cells = state["matrix"]["cells"]
        if self.cells is not None and len(self.cells) == len(cells):
            pairs = enumerate(zip(self.cells, cells, strict=True))
            state["patch"] = [[i, cell] for i, (old, cell) in pairs if old != cell]
            del state["matrix"]
        self.cells = cells
        self.sent = (state["version"], state["status"])
        self.sent_final = bool(state["final"])
        await self.send_json(state)
        if not self.sent_final:
            self.keepalive_start()
        return True

"""Training sessions in tests: an OpenEnv ``/ws`` reset from a trainer, and waiting for
the episodes the recorder stores off the episode's thread."""

from __future__ import annotations

import json
import time

from websockets.asyncio.client import connect


async def ws_reset(server, *, headers: dict[str, str], data: dict, path: str = "/ws") -> dict:
    """One OpenEnv reset over ``/ws`` (then the socket closes); the server's answer."""
    async with connect(server.ws_url(path), additional_headers=headers) as ws:
        await ws.send(json.dumps({"type": "reset", "data": data}))
        return json.loads(await ws.recv())


def training_episodes(*, count: int, final: bool = True, timeout: float = 30.0) -> list:
    """Every training episode (oldest first) once there are ``count`` of them (and, with
    ``final``, all their runs ended); fails on timeout with what there is."""
    from apps.training.models import TrainingEpisode

    deadline = time.monotonic() + timeout
    while True:
        episodes = list(
            TrainingEpisode.objects.select_related("session", "run", "run__task").order_by("run_id")
        )
        if len(episodes) >= count and (not final or all(e.run.is_final for e in episodes)):
            return episodes
        if time.monotonic() > deadline:
            raise AssertionError(f"expected {count} training episodes, have {episodes}")
        time.sleep(0.05)

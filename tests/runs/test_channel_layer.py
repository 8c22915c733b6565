"""The production channel layer (channels_redis) keeps a quiet consumer alive."""

import asyncio
import contextlib
import random

import pytest
from channels.exceptions import StopConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from channels_redis.core import RedisChannelLayer


async def test_a_consumer_waiting_longer_than_redis_default_timeout_still_gets_its_message():
    # redis-py's default socket timeout (5 s) equals channels_redis's blocking read: without
    # room between them a page whose run is quiet for 5 s lost its socket.
    layer = get_channel_layer()
    assert type(layer).__name__ == "RedisChannelLayer"
    channel = await layer.new_channel()

    async def later():
        await asyncio.sleep(6.5)
        await layer.send(channel, {"type": "run.status", "run_id": 1})

    sender = asyncio.create_task(later())
    message = await asyncio.wait_for(layer.receive(channel), timeout=20)
    await sender
    assert message == {"type": "run.status", "run_id": 1}


async def test_a_busy_process_receives_every_group_message_sent_while_it_lagged():
    # All consumers of one web process share one Redis key in channels_redis, and its
    # group_send drops (logging at INFO) what exceeds that key's capacity: 100 messages
    # by default. With 100 live runs the page server lagged and lost final status lines.
    layer = get_channel_layer()
    runs = range(300)
    channels = {run: await layer.new_channel() for run in runs}  # one page per run
    for run, channel in channels.items():
        await layer.group_add(f"capacity-test-{run}", channel)
    try:
        for run in runs:  # each run's final status, none read meanwhile
            await layer.group_send(f"capacity-test-{run}", {"type": "run.status", "run_id": run})
        received = [
            await asyncio.wait_for(layer.receive(channels[run]), timeout=10) for run in runs
        ]
    finally:
        for run, channel in channels.items():
            await layer.group_discard(f"capacity-test-{run}", channel)
    assert [m["run_id"] for m in received] == list(runs)


@pytest.mark.slow
def test_a_consumer_told_to_disconnect_stops_its_channel_receive_every_time(settings):
    """A consumer whose socket closes must stop reading its channel. With a client-side
    socket timeout, redis-py sent each command through asyncio.wait_for, which on
    Python 3.11 can swallow the cancellation: about 1 disconnect in 20 left a receive
    polling Redis for ever (a test then hung in teardown). Our layer's settings, 200
    disconnects at random moments of a receive: every consumer ends."""
    config = settings.CHANNEL_LAYERS["default"]["CONFIG"]

    async def consumer(layer, channel, inbox):
        async def dispatch(message):
            if message == "disconnect":
                raise StopConsumer

        with contextlib.suppress(StopConsumer):
            await await_many_dispatch([inbox.get, lambda: layer.receive(channel)], dispatch)

    async def disconnect_once() -> bool:
        layer = RedisChannelLayer(**config)
        try:
            channel = await layer.new_channel()
            inbox: asyncio.Queue = asyncio.Queue()
            task = asyncio.ensure_future(consumer(layer, channel, inbox))
            await asyncio.sleep(random.uniform(0, 0.03))  # noqa: S311 - a moment in a read
            inbox.put_nowait("disconnect")
            done, _ = await asyncio.wait([task], timeout=8)
            if not done:
                task.cancel()
            return bool(done)
        finally:
            await layer.flush()

    for attempt in range(200):
        assert asyncio.run(disconnect_once()), f"disconnect {attempt}: the receive went on"

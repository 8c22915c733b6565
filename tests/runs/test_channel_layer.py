"""The production channel layer (channels_redis) keeps a quiet consumer alive."""

import asyncio

from channels.layers import get_channel_layer


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

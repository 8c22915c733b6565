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

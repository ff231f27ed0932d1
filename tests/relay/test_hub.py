"""The stream hub (relay/hub.py) against a real Redis: subscribers that join a key while it is
being written, all at once, each get every entry after their position, in order, once.

The hub's connections are kept busy so that a key's first subscriber may open a new one while
later subscribers find an open one: their catch-ups then reach Redis before the first's, the
order in which a subscriber could once miss the entries written between the two.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

import pytest
import redis
from conftest import REDIS_URL

from relay.hub import StreamHub, async_client
from store.settings import Settings

pytestmark = pytest.mark.redis

ENTRIES = 300
SUBSCRIBERS = 120
ROUNDS = 5


def hub_settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "var", database_url="sqlite://", redis_url=REDIS_URL)


async def follow(hub: StreamHub, key: str, start: asyncio.Event, delay: float) -> list[int]:
    """Join `key` from its start `delay` seconds after `start` is set; the entries' numbers
    until the last."""
    await start.wait()
    await asyncio.sleep(delay)
    subscription, events = await hub.subscribe(key, "0-0")
    try:
        seen = [event.data["n"] for event in events]
        while not seen or seen[-1] < ENTRIES - 1:
            seen += [event.data["n"] for event in await subscription.next(10)]
        return seen
    finally:
        subscription.close()


async def keep_busy(hub: StreamHub, done: asyncio.Event) -> None:
    """Other streams' commands on the hub's connections: joiners wait for one, in any order."""
    while not done.is_set():  # not cancelled: redis-py's read can swallow a cancellation
        await hub.client.xrange("test-hub:none", count=1)
        await asyncio.sleep(0)


async def write(settings: Settings, key: str, start: asyncio.Event) -> None:
    """ENTRIES entries, the first few before the subscribers join, the rest as they do."""
    client = async_client(settings)
    try:
        for n in range(ENTRIES):
            if n == 3:
                start.set()
            await client.xadd(key, {"kind": "n", "data": f'{{"n": {n}}}'})
            await client.expire(key, 60)
            await asyncio.sleep(0)
    finally:
        await client.aclose()


def test_subscribers_joining_a_key_as_it_is_written_each_get_every_entry_once(
    tmp_path: Path, redis_client: redis.Redis
) -> None:
    settings = hub_settings(tmp_path)

    async def one_round() -> list[list[int]]:
        """A fresh hub and key: the key's first subscriber opens one of the hub's connections
        while others, joining later, may find an open one and reach Redis first."""
        hub = StreamHub(settings)
        await hub.start()
        key = f"test-hub:{uuid.uuid4().hex}"
        start, done = asyncio.Event(), asyncio.Event()
        busy = [asyncio.create_task(keep_busy(hub, done)) for _ in range(8)]
        try:
            writer = asyncio.create_task(write(settings, key, start))
            followers = [
                follow(hub, key, start, random.uniform(0, 0.005)) for _ in range(SUBSCRIBERS)
            ]
            heard = await asyncio.wait_for(asyncio.gather(*followers), 30)
            await writer
            assert hub.subscriptions == 0
            return heard
        finally:
            done.set()
            await asyncio.gather(*busy)
            await hub.stop()

    async def rounds() -> list[list[int]]:
        return [seen for _ in range(ROUNDS) for seen in await one_round()]

    heard = asyncio.run(rounds())
    every = list(range(ENTRIES))
    wrong = [seen for seen in heard if seen != every]
    missed = [sorted(set(every) - set(seen))[:10] for seen in wrong[:3]]
    assert not wrong, (
        f"{len(wrong)} of {len(heard)} subscribers did not hear every entry once, in order; "
        f"the first missed {missed}"
    )


def test_an_opening_command_that_timed_out_is_tried_again_and_a_lasting_outage_still_fails():
    from relay.hub import OPENING_PAUSES, _patiently

    tries: list[int] = []

    async def busy_twice() -> str:
        tries.append(1)
        if len(tries) <= 2:
            raise redis.TimeoutError("Timeout reading from socket")
        return "answered"

    async def always_down() -> str:
        tries.append(1)
        raise redis.ConnectionError("Connection refused")

    assert asyncio.run(_patiently(busy_twice)) == "answered" and len(tries) == 3
    tries.clear()
    with pytest.raises(redis.ConnectionError):
        asyncio.run(_patiently(always_down))
    assert len(tries) == len(OPENING_PAUSES) + 1

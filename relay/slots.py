"""Stream slots: how many streams and waits one token holds open, across every API process.

Each open stream or wait holds a slot: a member of a sorted set of the token's in Redis, scored
by when its lease lapses. The API process that serves it renews its leases every
LEASE_RENEW_SECONDS and frees the slot when the connection ends; a process that dies leaves
leases that lapse after LEASE_SECONDS. Taking a slot (when the request is accepted) drops lapsed
leases and refuses past the token's limit, in one script. A token has one set for its SSE
streams and waits (`naming.stream_slots`) and one for its MCP listen streams
(`naming.listen_slots`); the functions ending in `_in` take the set's key.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

import redis
import redis.asyncio as aioredis

from relay import naming

LEASE_SECONDS = 60
LEASE_RENEW_SECONDS = 20

_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]), ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""


def _now_ms() -> int:
    return int(time.time() * 1000)


def take(client: redis.Redis, token: str, limit: int) -> str | None:
    """A new stream slot of `token` (its id), or None when the token already holds `limit`."""
    slot = uuid.uuid4().hex
    taken = client.register_script(_TAKE)(
        keys=[naming.stream_slots(token)], args=[_now_ms(), LEASE_SECONDS * 1000, limit, slot]
    )
    return slot if taken else None


async def take_in(client: aioredis.Redis, key: str, limit: int) -> str | None:
    """A new slot of the set `key` (its id), or None when the set already holds `limit`."""
    slot = uuid.uuid4().hex
    taken = await client.register_script(_TAKE)(
        keys=[key], args=[_now_ms(), LEASE_SECONDS * 1000, limit, slot]
    )
    return slot if taken else None


def release_sync(client: redis.Redis, token: str, slot: str) -> None:
    client.zrem(naming.stream_slots(token), slot)


async def release(client: aioredis.Redis, token: str, slot: str) -> None:
    await release_in(client, naming.stream_slots(token), slot)


async def release_in(client: aioredis.Redis, key: str, slot: str) -> None:
    await client.zrem(key, slot)


async def renew(client: aioredis.Redis, held: Iterable[tuple[str, str]]) -> None:
    """Extend the leases of the (token, slot) pairs this process serves, in one round trip."""
    await renew_in(client, [(naming.stream_slots(token), slot) for token, slot in held])


async def renew_in(client: aioredis.Redis, held: Iterable[tuple[str, str]]) -> None:
    """Extend the leases of the (key, slot) pairs this process serves, in one round trip."""
    lease_ms = LEASE_SECONDS * 1000
    lapses = _now_ms() + lease_ms
    async with client.pipeline(transaction=False) as pipe:
        keys = set()
        for key, slot in held:
            pipe.zadd(key, {slot: lapses}, xx=True)
            keys.add(key)
        for key in keys:
            pipe.pexpire(key, lease_ms)
        await pipe.execute()

"""Stream slots: how many streams and waits one token holds open, across every API process.

Each open stream or wait holds a slot: a member of the token's sorted set in Redis, scored by
when its lease lapses. The API process that serves it renews its leases every LEASE_RENEW_SECONDS
and frees the slot when the connection ends; a process that dies leaves leases that lapse after
LEASE_SECONDS. Taking a slot (`take`, when the request is accepted) drops lapsed leases and
refuses past the token's limit, in one script.
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
    """A new slot of `token` (its id), or None when the token already holds `limit`."""
    slot = uuid.uuid4().hex
    lease_ms = LEASE_SECONDS * 1000
    taken = client.register_script(_TAKE)(
        keys=[naming.stream_slots(token)], args=[_now_ms(), lease_ms, limit, slot]
    )
    return slot if taken else None


def release_sync(client: redis.Redis, token: str, slot: str) -> None:
    client.zrem(naming.stream_slots(token), slot)


async def release(client: aioredis.Redis, token: str, slot: str) -> None:
    await client.zrem(naming.stream_slots(token), slot)


async def renew(client: aioredis.Redis, held: Iterable[tuple[str, str]]) -> None:
    """Extend the leases of the (token, slot) pairs this process serves, in one round trip."""
    lease_ms = LEASE_SECONDS * 1000
    lapses = _now_ms() + lease_ms
    async with client.pipeline(transaction=False) as pipe:
        tokens = set()
        for token, slot in held:
            pipe.zadd(naming.stream_slots(token), {slot: lapses}, xx=True)
            tokens.add(token)
        for token in tokens:
            pipe.pexpire(naming.stream_slots(token), lease_ms)
        await pipe.execute()

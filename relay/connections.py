"""The Redis client every skillfleet process uses for short commands."""

from __future__ import annotations

from typing import Any

import redis

from store.limits import REDIS_CONNECT_TIMEOUT_SECONDS, REDIS_SOCKET_TIMEOUT_SECONDS
from store.settings import Settings


def redis_client(settings: Settings) -> redis.Redis:
    """A client that fails fast when Redis is away; blocking reads use streams.blocking_client."""
    return redis.Redis.from_url(
        settings.redis,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=REDIS_SOCKET_TIMEOUT_SECONDS,
        health_check_interval=30,
    )


def reply_text(value: Any) -> str:
    """A field of a Redis reply as text (bytes from a client that does not decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def database_number(client: redis.Redis) -> int:
    """The Redis database `client` uses: pub/sub channels are server-wide, so ours name it."""
    return int(client.connection_pool.connection_kwargs.get("db", 0))

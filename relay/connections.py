"""The Redis clients every skillfleet process uses: straight to `REDIS_URL`'s server, or to the
primary that Redis Sentinel names when `SKILLFLEET_REDIS_SENTINELS` is set.

A Sentinel-managed client asks the sentinels for the primary's address each time it opens a
connection, and drops a connection whose server answers as a replica (a demoted primary), so
after a failover its next command reaches the new primary (docs/operations.md).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.connection import parse_url
from redis.sentinel import Sentinel, SentinelConnectionPool

from store import tracing
from store.limits import REDIS_CONNECT_TIMEOUT_SECONDS, REDIS_SOCKET_TIMEOUT_SECONDS
from store.settings import Settings

# The settings each client was built from: a client derived from one (same_server) or a Celery
# app made for one (relay/notifier.py) reaches the same Redis, through Sentinel when it does.
_settings: weakref.WeakKeyDictionary[redis.Redis, Settings] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def redis_client(settings: Settings) -> redis.Redis:
    """A client that fails fast when Redis is away; blocking reads use streams.blocking_client."""
    options: dict[str, Any] = {
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
        "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
        "health_check_interval": 30,
    }
    client: redis.Redis
    if settings.redis_sentinels:
        client = sentinel(settings).master_for(
            settings.redis_sentinel_master, redis_class=redis.Redis, **options
        )
    else:
        client = redis.Redis.from_url(settings.redis, **options)
    tracing.instrument_redis(client)
    with _lock:
        _settings[client] = settings
    return client


def sentinel(settings: Settings) -> Sentinel:
    """The sentinels of `settings`; clients they make use `REDIS_URL`'s database and password."""
    return Sentinel(
        settings.redis_sentinels, sentinel_kwargs=_sentinel_options(), **primary_options(settings)
    )


def async_client(settings: Settings, **options: Any) -> aioredis.Redis:
    """A `redis.asyncio` client whose connections come from a BlockingConnectionPool made with
    `options`: of `REDIS_URL`'s server, or of the primary the sentinels name."""
    if settings.redis_sentinels:
        manager = AsyncSentinel(
            settings.redis_sentinels,
            sentinel_kwargs=_sentinel_options(),
            **primary_options(settings),
        )
        client: aioredis.Redis = manager.master_for(
            settings.redis_sentinel_master,
            redis_class=aioredis.Redis,
            connection_pool_class=BlockingSentinelConnectionPool,
            **options,
        )
    else:
        pool = aioredis.BlockingConnectionPool.from_url(settings.redis, **options)
        client = aioredis.Redis(connection_pool=pool)
    tracing.instrument_redis(client)
    return client


class BlockingSentinelConnectionPool(AsyncSentinelConnectionPool, aioredis.BlockingConnectionPool):
    """redis.asyncio's Sentinel pool that waits for a free connection past `max_connections`
    (as BlockingConnectionPool does) instead of failing."""


def primary_options(settings: Settings) -> dict[str, Any]:
    """`REDIS_URL`'s database number and credentials, for the primary Sentinel names."""
    parsed = parse_url(settings.redis)  # type: ignore[no-untyped-call]
    return {key: parsed[key] for key in ("db", "username", "password") if key in parsed}


def _sentinel_options() -> dict[str, Any]:
    return {
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_SECONDS,
        "socket_timeout": REDIS_SOCKET_TIMEOUT_SECONDS,
    }


def same_server(client: redis.Redis, **changes: Any) -> redis.Redis:
    """A client with its own connections to `client`'s server (the primary Sentinel names, for
    a Sentinel-managed one), its connection settings changed by `changes`."""
    pool = client.connection_pool
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k != "connection_pool"}
    kwargs.update(changes)
    found: redis.Redis
    if isinstance(pool, SentinelConnectionPool):
        found = redis.Redis(
            connection_pool=SentinelConnectionPool(  # type: ignore[no-untyped-call]
                pool.service_name,
                pool.sentinel_manager,
                connection_class=pool.connection_class,
                **kwargs,
            )
        )
    else:
        found = redis.Redis(
            connection_pool=redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)
        )
    tracing.instrument_redis(found)
    with _lock:
        if client in _settings:
            _settings[found] = _settings[client]
    return found


def settings_of(client: redis.Redis) -> Settings | None:
    """The settings `client` was built from by redis_client or same_server, if it was."""
    with _lock:
        return _settings.get(client)


def reply_text(value: Any) -> str:
    """A field of a Redis reply as text (bytes from a client that does not decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def database_number(client: redis.Redis) -> int:
    """The Redis database `client` uses: pub/sub channels are server-wide, so ours name it."""
    return int(client.connection_pool.connection_kwargs.get("db", 0))

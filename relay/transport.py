"""kombu's Redis transport, made to survive losing Redis with a message in flight.

With late acks a worker holds unacknowledged messages while it runs them. When the broker
connection drops, Celery closes it and kombu's channel tries to restore those messages: after the
connection's transport was already detached, so building a Redis pool raises AttributeError
('NoneType' object has no attribute 'hostname'). Celery takes that for an unrecoverable error
and stops the worker for good. Here the channel reports a closed connection as what it is, a
connection error, which kombu ignores while closing; Celery then reconnects as it does for any
outage. The unacknowledged message stays in Redis and comes back after the visibility timeout,
where the run's claim makes it harmless.

It also keeps one Redis client per channel instead of building one for every command.
"""

from __future__ import annotations

from typing import Any

import kombu.transport
import redis
from kombu.transport import redis as kombu_redis

ALIAS = "skillfleet-redis"


class Channel(kombu_redis.Channel):
    _sync_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        """kombu builds a new client object per command (~0.1 ms each); keep one per pool.

        A client only holds its pool, and redis-py clients are thread-safe.
        """
        if asynchronous:
            return super()._create_client(asynchronous)  # type: ignore[no-untyped-call]
        client = self._sync_client
        if client is None or client.connection_pool is not self.pool:
            client = self._sync_client = super()._create_client(False)  # type: ignore[no-untyped-call]
        return client

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            raise redis.ConnectionError("The broker connection was closed.")
        params: dict[str, Any] = super()._connparams(asynchronous)  # type: ignore[no-untyped-call]
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel


def register() -> None:
    """Make `skillfleet-redis://` and `skillfleet-redis+socket://` broker URLs use Transport."""
    kombu.transport.TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")


def broker_url(redis_url: str) -> str:
    """The broker URL for a redis-py URL: `redis://` and `unix://` through this transport."""
    if redis_url.startswith("unix://"):
        return f"{ALIAS}+socket://" + redis_url.removeprefix("unix://")
    if redis_url.startswith("redis://"):
        return f"{ALIAS}://" + redis_url.removeprefix("redis://")
    return redis_url

"""kombu's Redis transport, made to survive losing Redis with a message in flight.

With late acks a worker holds unacknowledged messages while it runs them. When the broker
connection drops, Celery closes it and kombu's channel tries to restore those messages: after the
connection's transport was already detached, so building a Redis pool raises AttributeError
('NoneType' object has no attribute 'hostname', kombu 5.7 still). Celery takes that for an
unrecoverable error and stops the worker for good. Here the channel reports a closed connection
as what it is, a connection error, which kombu ignores while closing; Celery then reconnects as
it does for any outage. The unacknowledged message stays in Redis and comes back after the
visibility timeout, where the run's claim makes it harmless.

The same holds for kombu's Sentinel channel, which builds its pool from the same method.

Private API used: `kombu.transport.redis.Channel._connparams` and
`kombu.transport.redis.SentinelChannel._connparams` (overridden). Verified with kombu
5.7; pinned to `>=5.7,<5.8`. `SKILLFLEET_FENCED_KOMBU=false` uses kombu's own transport.
"""

from __future__ import annotations

from typing import Any

import kombu.transport
import redis
from kombu.transport import redis as kombu_redis

ALIAS = "skillfleet-redis"
SENTINEL_ALIAS = "skillfleet-sentinel"


class _ClosedIsConnectionError:
    """A channel whose pool is asked for after its connection closed says so as a connection
    error (kombu ignores those while closing), not as an AttributeError."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:  # type: ignore[attr-defined]
            raise redis.ConnectionError("The broker connection was closed.")
        params: dict[str, Any] = super()._connparams(asynchronous)  # type: ignore[misc]
        return params


class Channel(_ClosedIsConnectionError, kombu_redis.Channel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelChannel(_ClosedIsConnectionError, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel builds its pool from `_connparams` too (before it reads the
    sentinels off the detached connection), so the same guard applies."""


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def register() -> None:
    """Make `skillfleet-redis://` and `skillfleet-redis+socket://` broker URLs use Transport,
    and the transport named SENTINEL_ALIAS SentinelTransport.

    kombu's Sentinel channel takes the sentinels only from `sentinel://` URLs, so a Sentinel
    broker keeps its `sentinel://…;sentinel://…` URL and names this transport in Celery's
    `broker_transport` (relay/app.py)."""
    kombu.transport.TRANSPORT_ALIASES.setdefault(ALIAS, f"{__name__}:Transport")
    kombu.transport.TRANSPORT_ALIASES.setdefault(SENTINEL_ALIAS, f"{__name__}:SentinelTransport")


def broker_url(redis_url: str) -> str:
    """The broker URL for a redis-py URL: `redis://` and `unix://` through this transport."""
    if redis_url.startswith("unix://"):
        return f"{ALIAS}+socket://" + redis_url.removeprefix("unix://")
    if redis_url.startswith("redis://"):
        return f"{ALIAS}://" + redis_url.removeprefix("redis://")
    return redis_url

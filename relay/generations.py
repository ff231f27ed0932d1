"""Generations: Redis counters that tell every process its cached reads went stale.

Two exist: the tokens generation (bumped when a token is deleted) and the skills index's
(bumped after a skill row changes). Every API request needs both before it trusts what it
cached (api/auth.py, store/indexcache.py). Asking Redis for them is a round trip, about 0.3 ms
of the request's time; a `GenerationWatch` answers from memory instead, kept current by Redis
pub/sub: `bump` increments a counter and publishes its name and new value in one script, and
each process hears it on a connection of its own.

A request drains what that subscription holds before it reads (a poll, no round trip), so it
sees every bump whose writer had its reply: Redis writes the message to the subscribers in the
same pass as that reply. The watch answers from memory only while it is live: subscribed, and
its last answered PING was sent within LIVE_SECONDS (it pings every PING_SECONDS while it is
read; an answer proves that everything published before the PING reached it). Otherwise (the first
requests of a process, after a quiet spell, or once its connection failed) a request asks
Redis as before, and the watch subscribes again; once subscribed, it reads the counters
once, as bumps may have been missed meanwhile. Either way a request gets the counters' values,
so the answers cached under them stay good across the two.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis
import structlog
from redis.backoff import NoBackoff
from redis.client import PubSub
from redis.retry import Retry

from relay import naming
from relay.connections import database_number, reply_text, same_server

log = structlog.get_logger(__name__)

PING_SECONDS = 0.5
LIVE_SECONDS = 1.0
RETRY_SECONDS = 1.0


_BUMP = """
local value = redis.call('INCR', KEYS[1])
redis.call('PUBLISH', ARGV[1], KEYS[1] .. ' ' .. value)
return value
"""


def bump(client: redis.Redis, key: str) -> None:
    """Increment the generation `key` and tell every watch its new value.

    Redis may write the script's reply before the message to the subscribers (both at the end
    of the same pass of its loop); a PING is answered in a later pass, so once it returns the
    message is on its way to every watch, and a request that follows can't miss it.
    """
    client.register_script(_BUMP)(keys=[key], args=[_channel(client)])
    client.ping()


class GenerationWatch:
    """This process's view of some generations (`keys`); see the module's text.

    `read()` gives each key's counter (b"0" before its first bump), or None when Redis can't
    be asked.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: tuple[str, ...],
        ping_seconds: float = PING_SECONDS,
        live_seconds: float = LIVE_SECONDS,
    ) -> None:
        self.client = client
        self.keys = keys
        self.ping_seconds = ping_seconds
        self.live_seconds = live_seconds
        self.asked = 0  # reads that asked Redis, for the watch's tests
        self._lock = threading.Lock()
        self._listener = _listener(client)
        self._pubsub: PubSub | None = None
        self._pid = os.getpid()
        self._subscribed = False
        self._heard = 0.0  # when the last answered PING (or the SUBSCRIBE) was sent
        self._sent = 0.0
        self._pinged = False
        self._retry_at = 0.0
        self._values: tuple[bytes, ...] = ()

    def read(self) -> tuple[bytes, ...] | None:
        with self._lock:
            if self._live():
                return self._values
        return self._ask()

    def close(self) -> None:
        with self._lock:
            self._drop(retry=False)

    def _ask(self) -> tuple[bytes, ...] | None:
        self.asked += 1
        try:
            values = self.client.mget(self.keys)
        except redis.RedisError:
            return None
        return tuple(str(int(value or 0)).encode() for value in values)

    def _live(self) -> bool:
        if self._pid != os.getpid():  # a forked child: the connection is its parent's
            self._pubsub, self._subscribed, self._pid = None, False, os.getpid()
        now = time.monotonic()
        if self._pubsub is None:
            if now >= self._retry_at:
                self._subscribe()
            return False
        try:
            while (message := self._pubsub.get_message(timeout=0.0)) is not None:
                self._take(message)
            waiting = self._pinged or not self._subscribed
            if waiting and now - self._sent >= self.live_seconds:  # cut off silently: start over
                raise redis.TimeoutError("no answer from Redis on the watch's connection")
            if self._subscribed and not self._pinged and now - self._heard >= self.ping_seconds:
                self._pubsub.ping()
                self._pinged, self._sent = True, now
        except (redis.RedisError, OSError) as e:
            log.info("generation watch lost its connection", error=str(e))
            self._drop()
            return False
        return self._subscribed and time.monotonic() - self._heard < self.live_seconds

    def _subscribe(self) -> None:
        pubsub = self._listener.pubsub()
        sent = time.monotonic()
        try:
            pubsub.subscribe(_channel(self.client))
        except (redis.RedisError, OSError):
            pubsub.close()
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return
        self._pubsub, self._sent = pubsub, sent

    def _take(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "pong":
            self._heard, self._pinged = self._sent, False
        elif kind == "subscribe":  # bumps before it were not heard: read where they got to
            values = self._ask()
            if values is None:
                raise redis.ConnectionError("the generations could not be read")
            self._values, self._subscribed, self._heard = values, True, self._sent
        elif kind == "message" and self._subscribed:
            key, _, value = reply_text(message["data"]).partition(" ")
            if key in self.keys:  # counters only grow: a late message never moves one back
                index = self.keys.index(key)
                kept = list(self._values)
                kept[index] = str(max(int(kept[index]), int(value))).encode()
                self._values = tuple(kept)

    def _drop(self, retry: bool = True) -> None:
        if self._pubsub is not None:
            self._pubsub.close()
        self._pubsub = None
        self._subscribed = False
        self._pinged = False
        self._retry_at = time.monotonic() + RETRY_SECONDS if retry else 0.0


def _listener(client: redis.Redis) -> redis.Redis:
    """A client of `client`'s server for the watch's subscription that never retries: a lost
    connection is given up at once (the watch subscribes again after RETRY_SECONDS), so a
    request never waits out redis-py's backoff."""
    return same_server(client, retry=Retry(NoBackoff(), 0))


def _channel(client: redis.Redis) -> str:
    return naming.generations_channel(database_number(client))

"""The stream hub: one blocking XREAD per process for every Redis Stream its open connections
follow (runs' output, turns, owners' feeds, runs' ends), read with `redis.asyncio`.

A live connection subscribes to a key from an entry id; the hub's reader task reads all the
subscribed keys in one XREAD and hands each new entry to every subscription of its key. A
thousand watchers cost a thousand small queues and one Redis connection, not a thousand threads
or connections. A key subscribed for the first time wakes the reader (an entry on the process's
own wake stream), so it joins the next read at once.

A subscription first reads what its key already holds after its entry id (the catch-up, a page
at a time), then what the reader hands it; entries it already has are skipped, so none is lost
or repeated however the two overlap. A subscriber that falls more than MAX_QUEUED entries
behind is dropped (`Overflow`): its client reconnects with Last-Event-ID and loses nothing.
While Redis is away the reader retries every REDIS_RETRY_SECONDS and subscriptions see only
silence.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
import structlog

from relay import connections, naming
from relay.connections import reply_text
from relay.streams import Event, parse_entry_id
from store.limits import (
    MAX_BLOCK_MS,
    REDIS_CONNECT_TIMEOUT_SECONDS,
    REDIS_RETRY_SECONDS,
    REDIS_SOCKET_TIMEOUT_SECONDS,
)
from store.settings import Settings

log = structlog.get_logger(__name__)

MAX_QUEUED = 2_000  # entries a subscription may hold unread before it is dropped
READ_COUNT = 500  # entries per key per read
ASYNC_CONNECTIONS = 32  # per client
WAKE_TTL_SECONDS = 3_600
STOP_SECONDS = 0.2  # a stopping hub's read has this long to end before its connection is closed
OUTAGES = (redis.ConnectionError, redis.TimeoutError, OSError)
# Pauses before a stream's opening command is tried again when Redis did not answer in time.
OPENING_PAUSES = (0.2, 0.5, 1.0)
_T = TypeVar("_T")


class Overflow(Exception):
    """Raised by a subscription whose reader fell too far behind; its client should reconnect."""


def async_client(settings: Settings, blocking: bool = False) -> aioredis.Redis:
    """A `redis.asyncio` client of skillfleet's Redis (the primary Sentinel names, with
    sentinels); a blocking one outlasts the longest block.

    Its commands share at most ASYNC_CONNECTIONS connections, waiting for a free one: a
    thousand streams ending at once queue their commands rather than open a thousand.
    """
    timeout = REDIS_SOCKET_TIMEOUT_SECONDS + (MAX_BLOCK_MS / 1000 if blocking else 0)
    return connections.async_client(
        settings,
        max_connections=ASYNC_CONNECTIONS,
        timeout=REDIS_SOCKET_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_CONNECT_TIMEOUT_SECONDS,
        socket_timeout=timeout,
        health_check_interval=30,
    )


async def _patiently(attempt: Callable[[], Awaitable[_T]]) -> _T:
    """`attempt`, tried again after a pause when Redis did not answer in time: hundreds of
    streams opening at once on a loaded host can queue a command past its timeout, and a
    stream that fails before its first event leaves its client nothing to resume from. An
    outage that lasts fails as before, once the pauses are spent."""
    for pause in OPENING_PAUSES:
        try:
            return await attempt()
        except (redis.TimeoutError, redis.ConnectionError):
            await asyncio.sleep(pause)
    return await attempt()


def entry_event(entry_id: Any, fields: dict[Any, Any]) -> Event:
    decoded = {reply_text(k): reply_text(v) for k, v in fields.items()}
    data = json.loads(decoded.get("data", "{}"))
    if "run" in decoded:  # a run's end entry carries the run's end (RunStream.exit)
        data = {**data, "run": json.loads(decoded["run"])}
    return Event(reply_text(entry_id), decoded.get("kind", ""), data)


def _after(a: str, b: str) -> bool:
    """True when entry id `a` comes after `b`."""
    return (parse_entry_id(a) or (0, 0)) > (parse_entry_id(b) or (0, 0))


@dataclass(eq=False)
class Subscription:
    """One connection's view of one key: events after its position, in order, once each.

    While `behind`, the key holds entries after its position that the hub will not hand it (the
    first page of the catch-up was full, or the hub's reader skipped past what its catch-up
    covered): `next` reads them from the key, a page at a time, before what the hub handed over.
    `covered` is the newest entry its catch-up accounted for, once that is back.
    """

    hub: StreamHub
    key: str
    position: str
    queue: asyncio.Queue[list[Event]] = field(default_factory=asyncio.Queue)
    queued: int = 0
    overflowed: bool = False
    behind: bool = False
    covered: str | None = None
    quiet_since: float = field(default_factory=time.monotonic)  # when its last events came

    def deliver(self, events: list[Event]) -> None:
        if self.overflowed:
            return
        fresh = [event for event in events if _after(event.id, self.position)]
        if not fresh:
            return
        self.queued += len(fresh)
        if self.queued > MAX_QUEUED:
            self.overflowed = True
        self.queue.put_nowait(fresh)

    async def next(self, timeout: float) -> list[Event]:
        """The next new events, or [] when `timeout` seconds pass without any."""
        if not self.behind:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a cancellation
            # that comes as the queue hands over an item, and the connection's task would never
            # end.
            try:
                async with asyncio.timeout(timeout):
                    batch = await self.queue.get()
            except TimeoutError:
                return []
            self.queued -= len(batch)
            if self.overflowed:
                raise Overflow(f"{self.key}: the client fell more than {MAX_QUEUED} entries behind")
            if not self.behind:
                fresh = [event for event in batch if _after(event.id, self.position)]
                if fresh:
                    self.position = fresh[-1].id
                return fresh
            # Found behind while it waited: the batch is in the key too, after what it lacks.
        page = await self.hub.read_page(self.key, self.position)
        self.behind = len(page) == READ_COUNT
        if page:
            self.position = page[-1].id
        return page

    def close(self) -> None:
        self.hub.unsubscribe(self)


@dataclass
class _Watched:
    position: str
    subscribers: set[Subscription] = field(default_factory=set)
    jumped_to: str | None = None  # where its first subscriber's catch-up moved the reader

    def advance(self, entry_id: str) -> None:
        """Move the hub's read past `entry_id`; never back (a late reply can't rewind it)."""
        if _after(entry_id, self.position):
            self.position = entry_id


class StreamHub:
    """Follows the keys its subscriptions ask for; see the module's text."""

    def __init__(self, settings: Settings) -> None:
        self.reader = async_client(settings, blocking=True)
        self.client = async_client(settings)
        self.wake_key = naming.hub_wake(uuid.uuid4().hex)
        self.watched: dict[str, _Watched] = {}
        self.outages = 0  # reads that failed; a follower checks the database after one
        self._wake_position = "0-0"
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._read_forever(), name="stream-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=STOP_SECONDS)
            if not done:  # the read swallowed the cancellation: end it by closing its connection
                await self.reader.connection_pool.disconnect(inuse_connections=True)
            await asyncio.gather(self._task, return_exceptions=True)
        for client in (self.client, self.reader):
            try:
                if self._task is not None:
                    await client.delete(self.wake_key)
            except OUTAGES:
                pass
            await client.aclose()

    @property
    def subscriptions(self) -> int:
        return sum(len(watched.subscribers) for watched in self.watched.values())

    async def subscribe(self, key: str, after: str) -> tuple[Subscription, list[Event]]:
        """Follow `key` after entry id `after` (a concrete id): the subscription and the first
        page of what the key already holds after `after` (the rest comes from `next`). A
        command that times out is tried again a few times (`_patiently`)."""
        return await _patiently(lambda: self._subscribe(key, after))

    async def _subscribe(self, key: str, after: str) -> tuple[Subscription, list[Event]]:
        """One try of `subscribe`.

        A key new to the hub wakes the reader in the catch-up's round trip, and the reader
        takes it from its newest entry on: what is older comes through the pages. A subscriber
        that joined meanwhile may have had its catch-up answered first, before entries the
        reader now skips: it is set `behind`, and reads them from the key itself.
        """
        subscription = Subscription(self, key, after)
        watched = self.watched.get(key)
        new = watched is None
        if watched is None:
            watched = self.watched[key] = _Watched(after)
        watched.subscribers.add(subscription)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                if new:
                    pipe.xadd(self.wake_key, {"k": "1"}, maxlen=1)
                    pipe.expire(self.wake_key, WAKE_TTL_SECONDS)
                pipe.xrevrange(key, count=1)
                pipe.xread({key: after}, count=READ_COUNT)
                replies: Any = await pipe.execute()
        except BaseException:
            self.unsubscribe(subscription)
            raise
        newest, reply = replies[-2], replies[-1]
        page = [entry_event(i, f) for _k, entries in reply or [] for i, f in entries]
        if page:
            subscription.position = page[-1].id
        subscription.behind = len(page) == READ_COUNT
        covered = subscription.position
        if newest and _after(reply_text(newest[0][0]), covered):
            covered = reply_text(newest[0][0])
        subscription.covered = covered
        if new and newest:
            self._jump(watched, subscription, reply_text(newest[0][0]))
        elif watched.jumped_to is not None and _after(watched.jumped_to, covered):
            subscription.behind = True  # the reader skipped entries this catch-up never saw
        return subscription, page

    def _jump(self, watched: _Watched, first: Subscription, newest: str) -> None:
        """Take a new key from `newest` on; a subscriber whose catch-up covered less reads the
        rest from the key (one whose catch-up is still on its way checks when it is back)."""
        watched.advance(newest)
        watched.jumped_to = newest
        for other in watched.subscribers:
            if other is not first and other.covered is not None and _after(newest, other.covered):
                other.behind = True

    def unsubscribe(self, subscription: Subscription) -> None:
        watched = self.watched.get(subscription.key)
        if watched is None:
            return
        watched.subscribers.discard(subscription)
        if not watched.subscribers:
            del self.watched[subscription.key]  # the next read leaves it out

    async def read_page(self, key: str, after: str) -> list[Event]:
        """Up to READ_COUNT entries of `key` after `after`, without blocking."""
        reply: Any = await self.client.xread({key: after}, count=READ_COUNT)
        return [entry_event(i, f) for _k, entries in reply or [] for i, f in entries]

    async def read_after(self, key: str, after: str) -> list[Event]:
        """Every entry of `key` after `after`, read in pages (a stream's capped rest)."""
        events: list[Event] = []
        while page := await self.read_page(key, after):
            events.extend(page)
            after = page[-1].id
            if len(page) < READ_COUNT:
                break
        return events

    async def last_id(self, key: str) -> str:
        """The id of `key`'s newest entry ("0-0" for none): where "only what comes next" starts."""
        newest: Any = await _patiently(lambda: self.client.xrevrange(key, count=1))
        return reply_text(newest[0][0]) if newest else "0-0"

    async def _read_forever(self) -> None:
        this = asyncio.current_task()
        while this is None or not this.cancelling():  # a read may have swallowed the cancel
            streams: dict[Any, Any] = {k: w.position for k, w in self.watched.items()}
            streams[self.wake_key] = self._wake_position
            try:
                reply: Any = await self.reader.xread(streams, block=MAX_BLOCK_MS, count=READ_COUNT)
            except Exception as e:  # an outage, or a refusal (a replica, a missing permission)
                if this is not None and this.cancelling():
                    # redis-py's read may swallow a cancellation and fail later: still cancelled
                    raise asyncio.CancelledError from e
                self.outages += 1
                log.warning("stream hub read failed", error=repr(e))
                await asyncio.sleep(REDIS_RETRY_SECONDS)
                continue
            for raw_key, entries in reply or []:
                self._hand_out(reply_text(raw_key), entries)
        raise asyncio.CancelledError

    def _hand_out(self, key: str, entries: Iterable[Any]) -> None:
        listed = list(entries)
        if key == self.wake_key:
            self._wake_position = reply_text(listed[-1][0])
            return
        watched = self.watched.get(key)
        if watched is None or not listed:
            return  # every subscriber left while the read was on its way
        events = [entry_event(entry_id, fields) for entry_id, fields in listed]
        watched.advance(events[-1].id)
        for subscription in list(watched.subscribers):
            subscription.deliver(events)

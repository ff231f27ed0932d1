"""The owner's event feed: one Redis Stream per owner of the changes a frontend shows.

Writers note an event on the database session that makes the change; it is published to
`skillfleet:owner:<id>:events` only after that session commits, so a frontend never hears of a
change that was rolled back. The rows every call and run write go through a bare connection
instead (store.db.core_transaction): their writers collect the events in a list and send them
once committed, in a round trip they make anyway where they can (`add_to`), else in one of
their own (`publish_all`). Publishing is best effort: with Redis away the change still stands
and the event is only logged as lost. `GET /api/events` serves the stream as SSE.

Kinds: `approval.created`, `approval.answered`, `call.finished`, `run.state`, `job_run.state`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import redis
import structlog
from sqlalchemy import event
from sqlalchemy.orm import Session

from relay import held, naming
from relay.connections import reply_text
from relay.streams import Event, _event, blocking_client
from store.db import SessionFactory
from store.limits import MAX_BLOCK_MS, MAX_OWNER_EVENTS
from store.ownerevents import NOTED, OwnerEvent
from store.states import ApprovalStatus

log = structlog.get_logger(__name__)

_READY = "skillfleet.owner_events.ready"
# Commands of others sent in the same round trip as the events (relay/counters.py).
_RIDERS = "skillfleet.owner_events.riders"
Rider = Callable[[Any], object]


def publish(client: redis.Redis, owner_id: int, kind: str, data: dict[str, Any]) -> str | None:
    """Append one event to the owner's stream; None (and a log line) when Redis is away."""
    try:
        entry = client.xadd(
            naming.owner_events(owner_id),
            {"kind": kind, "data": json.dumps(data, default=str)},
            maxlen=MAX_OWNER_EVENTS,
            approximate=True,
        )
    except redis.RedisError as e:
        log.warning("owner event not published", kind=kind, error=str(e))
        return None
    return reply_text(entry)


def publish_all(
    client: redis.Redis, events: list[OwnerEvent], riders: Sequence[Rider] = ()
) -> None:
    """Append several (owner id, kind, data) events in one round trip, with the commands of
    `riders` (see `also`); best effort like publish."""
    if not events and not riders:
        return

    add = held.recorded(*riders, lambda pipe: add_to(pipe, events))
    kinds = [kind for _owner, kind, _data in events]
    if not held.hold(add, lambda: send(client, add, kinds)):  # held: see relay.held
        send(client, add, kinds)


def send(client: redis.Redis, add: Rider, kinds: Sequence[str] = ()) -> None:
    """Send the owner events (`kinds`) and riders `add` puts on a pipeline; best effort, as
    publish."""
    pipe = client.pipeline(transaction=False)
    add(pipe)
    try:
        pipe.execute()
    except redis.RedisError as e:
        log.warning("owner events not published", kinds=list(kinds), error=str(e))


def add_to(pipe: Any, events: list[OwnerEvent]) -> None:
    """Queue the events on a caller's pipeline, to travel in its round trip."""
    for owner_id, kind, data in events:
        pipe.xadd(
            naming.owner_events(owner_id),
            {"kind": kind, "data": json.dumps(data, default=str)},
            maxlen=MAX_OWNER_EVENTS,
            approximate=True,
        )


def also(session: Session, add: Rider) -> None:
    """Once `session` commits, `add(pipe)` puts its commands (a count, say) on the pipeline that
    publishes the session's events: one round trip for both. Nothing is sent on a rollback."""
    session.info.setdefault(_RIDERS, []).append(add)


def attach(sessions: SessionFactory, client: redis.Redis) -> None:
    """Publish what sessions of `sessions` noted, after each commit, through `client`."""

    @event.listens_for(sessions, "before_commit")
    def take_snapshots(session: Session) -> None:
        noted = session.info.pop(NOTED, [])
        ready = session.info.setdefault(_READY, [])
        for owner_id, kind, data in noted:
            snapshot = data() if callable(data) else data
            # An approval answered in the same transaction that made it is only "answered".
            if kind == "approval.created" and snapshot["status"] != ApprovalStatus.PENDING:
                kind = "approval.answered"
            ready.append((owner_id, kind, snapshot))

    @event.listens_for(sessions, "after_commit")
    def send(session: Session) -> None:
        ready = session.info.pop(_READY, [])
        riders = session.info.pop(_RIDERS, [])
        if len(ready) == 1 and not riders:
            publish(client, *ready[0])
        else:
            publish_all(client, ready, riders)

    @event.listens_for(sessions, "after_soft_rollback")
    def forget(session: Session, _transaction: Any) -> None:
        session.info.pop(NOTED, None)
        session.info.pop(_READY, None)
        session.info.pop(_RIDERS, None)


def read(
    client: redis.Redis, owner_id: int, after: str = "$", block_ms: int | None = None
) -> list[Event]:
    """The owner's events after entry id `after`; with `block_ms`, wait that long for one."""
    reader = client if block_ms is None else blocking_client(client)
    reply: Any = reader.xread({naming.owner_events(owner_id): after}, block=block_ms, count=500)
    return [
        _event(entry_id, fields) for _key, entries in reply or [] for entry_id, fields in entries
    ]


def follow(
    client: redis.Redis, owner_id: int, after: str, block_ms: int = MAX_BLOCK_MS
) -> Iterator[Event | None]:
    """Every event after `after`, forever; None each time a wait passes without one."""
    if after == "$":
        # "$" would skip what arrives between two reads: pin the position to the last entry.
        last: Any = client.xrevrange(naming.owner_events(owner_id), count=1)
        after = reply_text(last[0][0]) if last else "0-0"
    while True:
        events = read(client, owner_id, after, block_ms)
        if not events:
            yield None
            continue
        for found in events:
            after = found.id
            yield found

"""The owner's event feed: a Redis Stream per owner that a notifications feature delivers.

Each entry has a `kind` (e.g. `job_run.waiting`) and `data`, a JSON object with ids and one
sentence; never arguments or output.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from relay import feed, naming


@dataclass(frozen=True)
class OwnerEvent:
    id: str
    kind: str
    data: dict[str, Any]


def publish(client: redis.Redis, owner_id: int, kind: str, **data: Any) -> str | None:
    """Add one event to the owner's feed (relay/feed.py); Redis being away is only logged."""
    return feed.publish(client, owner_id, kind, data)


def read(client: redis.Redis, owner_id: int, after: str = "0-0") -> list[OwnerEvent]:
    """The owner's events after the entry id `after`, oldest first."""
    found = []
    entries: Any = client.xrange(naming.owner_events(owner_id), f"({after}", "+")
    for entry_id, fields in entries:
        decoded = {_text(k): _text(v) for k, v in fields.items()}
        found.append(
            OwnerEvent(_text(entry_id), decoded["kind"], json.loads(decoded.get("data", "{}")))
        )
    return found


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_one(client: redis.Redis, owner_id: int, event_id: str) -> OwnerEvent | None:
    """One event of the owner's feed by its id; None once it was trimmed."""
    entries: Any = client.xrange(naming.owner_events(owner_id), event_id, event_id)
    return decode(*entries[0]) if entries else None


def decode(entry_id: Any, fields: dict[Any, Any]) -> OwnerEvent:
    """An entry of a feed as Redis returns it (bytes or text)."""
    decoded = {_text(k): _text(v) for k, v in fields.items()}
    return OwnerEvent(_text(entry_id), decoded["kind"], json.loads(decoded.get("data", "{}")))

"""The owner's event feed: a Redis Stream per owner that a notifications feature delivers.

Each entry has a `kind` (e.g. `job_run.waiting`) and `data`, a JSON object with ids and one
sentence; never arguments or output. The control worker reads each listening owner's feed through
the consumer group `notifications` (workers/notify.py); the API starts that group when an owner
adds a push subscription or a webhook.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from relay import feed, naming, notifier
from relay.connections import reply_text

# What a push tells the owner: things that wait for them or went wrong.
PUSH_TITLES = {
    "approval.waiting": "A call waits for your approval",
    "question.waiting": "An agent asks you something",
    "owner.notified": "A notice from your agent",
    "review.waiting": "A skill waits for your review",
    "run.failed": "A script run failed",
    "run.timed_out": "A script run timed out",
    "run.interrupted": "A script run was interrupted",
    "job_run.failed": "A job run failed",
    "job_run.unanswered": "A job run went unanswered",
    "job_run.interrupted": "A job run was interrupted",
    "turn.failed": "An agent turn failed",
    "turn.timed_out": "An agent turn timed out",
    "turn.interrupted": "An agent turn was interrupted",
}
# Webhooks may also ask for these.
WEBHOOK_KINDS = (*PUSH_TITLES, "job_run.waiting")


@dataclass(frozen=True)
class OwnerEvent:
    id: str
    kind: str
    data: dict[str, Any]


def publish(client: redis.Redis, owner_id: int, kind: str, **data: Any) -> str | None:
    """Add one event to the owner's feed (relay/feed.py) and, for a notice, wake the notifier
    (relay/notifier.py); Redis being away is only logged."""
    entry = feed.publish(client, owner_id, kind, data)
    if entry is not None and kind in WEBHOOK_KINDS:
        notifier.wake(client, owner_id)
    return entry


def read(client: redis.Redis, owner_id: int, after: str = "0-0") -> list[OwnerEvent]:
    """The owner's events after the entry id `after`, oldest first."""
    found = []
    entries: Any = client.xrange(naming.owner_events(owner_id), f"({after}", "+")
    for entry_id, fields in entries:
        decoded = {reply_text(k): reply_text(v) for k, v in fields.items()}
        found.append(
            OwnerEvent(reply_text(entry_id), decoded["kind"], json.loads(decoded.get("data", "{}")))
        )
    return found


def read_one(client: redis.Redis, owner_id: int, event_id: str) -> OwnerEvent | None:
    """One event of the owner's feed by its id; None once it was trimmed."""
    entries: Any = client.xrange(naming.owner_events(owner_id), event_id, event_id)
    return decode(*entries[0]) if entries else None


def decode(entry_id: Any, fields: dict[Any, Any]) -> OwnerEvent:
    """An entry of a feed as Redis returns it (bytes or text)."""
    decoded = {reply_text(k): reply_text(v) for k, v in fields.items()}
    return OwnerEvent(reply_text(entry_id), decoded["kind"], json.loads(decoded.get("data", "{}")))


def ensure_group(client: redis.Redis, owner_id: int) -> None:
    """Create the owner's consumer group at the end of the feed: only new events notify."""
    try:
        client.xgroup_create(naming.owner_events(owner_id), naming.NOTIFY_GROUP, "$", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise


def start_listening(client: redis.Redis, owner_id: int) -> None:
    """An owner's first subscription or webhook: only events from now on are delivered."""
    ensure_group(client, owner_id)
    client.xgroup_setid(naming.owner_events(owner_id), naming.NOTIFY_GROUP, "$")

"""The owner's event feed: a Redis Stream per owner that a notifications feature delivers.

Each entry has a `kind` (e.g. `job_run.waiting`) and `data`, a JSON object with ids and one
sentence; never arguments or output.
"""

from __future__ import annotations

from typing import Any

import redis

from workers import feed


def publish(client: redis.Redis, owner_id: int, kind: str, **data: Any) -> str | None:
    """Add one event to the owner's feed (workers/feed.py); Redis being away is only logged."""
    return feed.publish(client, owner_id, kind, data)

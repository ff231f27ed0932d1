"""How much of the live streams Redis keeps, so that its memory stays bounded at any run rate.

Three caps, set by SKILLFLEET_RUN_OUTPUT_BYTES, _RUN_STREAM_TTL and _RUN_STREAMS_KEPT, hold
for runs' streams and agent turns' streams alike:

- a stream holds at most `output_bytes` of output (a turn's: of text), then one note that the
  rest is not streamed; the Run and Turn rows keep their own capped tails;
- a stream expires `ttl` seconds after it ended; while it runs, its writer sets that TTL again
  at most every `ttl / 2`, so the stream of a worker that died expires too;
- an ended stream is noted in a sorted set per kind, scored by when it ended, and the
  housekeeping task removes the oldest past `kept` of each kind (`trim`).

A reader that finds a stream gone rebuilds its events from the row (api/runs.py, api/turns.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from relay import naming
from relay.connections import reply_text
from store.limits import RUN_OUTPUT_BYTES, RUN_STREAM_TTL_SECONDS, RUN_STREAMS_KEPT
from store.settings import Settings

# Keys removed per command when ended streams are trimmed.
UNLINK_BATCH = 500


@dataclass(frozen=True)
class StreamCaps:
    """What a live stream may hold and how long; `kept` ended streams of each kind stay."""

    output_bytes: int = RUN_OUTPUT_BYTES
    ttl: int = RUN_STREAM_TTL_SECONDS
    kept: int = RUN_STREAMS_KEPT

    @classmethod
    def of(cls, settings: Settings) -> StreamCaps:
        return cls(settings.run_output_bytes, settings.run_stream_ttl, settings.run_streams_kept)


DEFAULT_CAPS = StreamCaps()


class Expiry:
    """The TTL of a live stream's keys, set with its first entries and again every half TTL."""

    def __init__(self, ttl: int) -> None:
        self.ttl = ttl
        self.due = -math.inf

    def refresh(self, pipe: Any, *keys: str) -> None:
        """Put EXPIRE commands on `pipe` (after its entries) when the TTL is due to be set."""
        now = time.monotonic()
        if now < self.due:
            return
        for key in keys:
            pipe.expire(key, self.ttl)
        self.due = now + self.ttl / 2

    def end(self, pipe: Any, *keys: str) -> None:
        """The TTL from the stream's end: put on `pipe` after its last entry."""
        for key in keys:
            pipe.expire(key, self.ttl)
        self.due = math.inf


def run_keys(run_id: str) -> tuple[str, ...]:
    return naming.run_stream(run_id), naming.run_end(run_id)


def turn_keys(turn_id: str) -> tuple[str, ...]:
    return (naming.turn_stream(turn_id),)


# Each kind of stream: the sorted set of its ended ones, and the keys of one by its id.
KINDS: tuple[tuple[str, Callable[[str], tuple[str, ...]]], ...] = (
    (naming.ended_runs(), run_keys),
    (naming.ended_turns(), turn_keys),
)


def ended(pipe: Any, index: str, stream_id: str) -> None:
    """Note on `pipe` that the stream of `stream_id` (a run's or a turn's) ended now."""
    pipe.zadd(index, {stream_id: time.time()})


def trim(client: redis.Redis, kept: int) -> int:
    """Remove the streams of each kind that ended before its newest `kept`; how many went."""
    return sum(_trim(client, index, keys_of, kept) for index, keys_of in KINDS)


def _trim(
    client: redis.Redis, index: str, keys_of: Callable[[str], tuple[str, ...]], kept: int
) -> int:
    over = int(client.zcard(index)) - kept
    if over <= 0:
        return 0
    # ZPOPMIN takes each one once, however many housekeeping tasks trim at the same time.
    popped: Any = client.zpopmin(index, over)
    keys = [key for member, _score in popped for key in keys_of(reply_text(member))]
    pipe = client.pipeline(transaction=False)
    for start in range(0, len(keys), UNLINK_BATCH):
        pipe.unlink(*keys[start : start + UNLINK_BATCH])
    pipe.execute()
    return len(popped)

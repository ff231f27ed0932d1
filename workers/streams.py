"""A run's live output: stdout/stderr chunks, status and exit events in one Redis Stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis

from workers import naming

CHUNK_BYTES = 16 * 1024
# Finished streams stay replayable this long; the Run row keeps the capped output for good.
FINISHED_TTL_SECONDS = 3600
# Output published to a stream is capped; past it one note says so and the rest is dropped.
MAX_STREAM_BYTES = 8 * 1024 * 1024
END_KINDS = ("exit",)


@dataclass(frozen=True)
class Event:
    id: str
    kind: str
    data: dict[str, Any]


class RunStream:
    """The writer side of one run's stream."""

    def __init__(self, client: redis.Redis, run_id: str) -> None:
        self.client = client
        self.key = naming.run_stream(run_id)
        self.published = 0
        self.capped = False

    def _add(self, kind: str, data: dict[str, Any]) -> str:
        entry = self.client.xadd(self.key, {"kind": kind, "data": json.dumps(data)})
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    def status(self, state: str, **details: Any) -> str:
        return self._add("status", {"status": state, **details})

    def output(self, stream: str, data: bytes) -> None:
        """Publish stdout/stderr bytes in chunks of at most 16 KiB, up to the stream cap."""
        if self.capped:
            return
        room = MAX_STREAM_BYTES - self.published
        if len(data) > room:
            data = data[:room]
            self.capped = True
        for start in range(0, len(data), CHUNK_BYTES):
            chunk = data[start : start + CHUNK_BYTES]
            self._add(stream, {"text": chunk.decode("utf-8", "replace")})
        self.published += len(data)
        if self.capped:
            note = f"[skillfleet: output past {MAX_STREAM_BYTES // 2**20} MiB is not streamed]\n"
            self._add("stderr", {"text": note})

    def exit(self, state: str, exit_code: int | None, **details: Any) -> str:
        """The last event of a run; the stream then expires after an hour."""
        data = {"status": state, "exit_code": exit_code, **details}
        pipe = self.client.pipeline(transaction=False)
        pipe.xadd(self.key, {"kind": "exit", "data": json.dumps(data)})
        pipe.expire(self.key, FINISHED_TTL_SECONDS)
        entry = pipe.execute()[0]
        return entry.decode() if isinstance(entry, bytes) else str(entry)


def read_events(
    client: redis.Redis, run_id: str, after: str = "0-0", block_ms: int | None = None
) -> list[Event]:
    """Events after entry id `after`; with `block_ms`, wait that long for the first one."""
    return read_stream(client, naming.run_stream(run_id), after, block_ms)


def read_stream(
    client: redis.Redis, key: str, after: str = "0-0", block_ms: int | None = None
) -> list[Event]:
    """Events of the stream `key` after `after` (a run's or a turn's)."""
    reply: Any = client.xread({key: after}, block=block_ms, count=500)
    events = []
    for _key, entries in reply or []:
        for entry_id, fields in entries:
            events.append(_event(entry_id, fields))
    return events


def follow(
    client: redis.Redis, run_id: str, after: str = "0-0", block_ms: int = 15_000
) -> Iterator[Event | None]:
    """Every event after `after` until the exit event; yields None when a wait times out."""
    return follow_stream(client, naming.run_stream(run_id), END_KINDS, after, block_ms)


def follow_stream(
    client: redis.Redis,
    key: str,
    end_kinds: tuple[str, ...],
    after: str = "0-0",
    block_ms: int = 15_000,
) -> Iterator[Event | None]:
    """Every event of the stream `key` after `after` until one of `end_kinds`."""
    while True:
        events = read_stream(client, key, after, block_ms)
        if not events:
            yield None
            continue
        for event in events:
            after = event.id
            yield event
            if event.kind in end_kinds:
                return


def _event(entry_id: Any, fields: dict[Any, Any]) -> Event:
    decoded = {_text(k): _text(v) for k, v in fields.items()}
    return Event(_text(entry_id), decoded.get("kind", ""), json.loads(decoded.get("data", "{}")))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def collected_output(client: redis.Redis, run_id: str) -> tuple[str, str]:
    """Everything a run printed so far, from its stream (for a run whose runner vanished)."""
    out: list[str] = []
    err: list[str] = []
    for event in read_events(client, run_id):
        if event.kind == "stdout":
            out.append(event.data.get("text", ""))
        elif event.kind == "stderr":
            err.append(event.data.get("text", ""))
    return "".join(out), "".join(err)


def wait_for_end(client: redis.Redis, run_id: str, timeout: float) -> bool:
    """Block until the run's exit event is in its stream, or `timeout` seconds passed."""
    import time

    deadline = time.monotonic() + timeout
    after = "0-0"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        events = read_events(client, run_id, after, block_ms=max(1, int(left * 1000)))
        for event in events:
            if event.kind in END_KINDS:
                return True
            after = event.id

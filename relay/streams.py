"""Live streams in Redis: a run's output, status and exit events; an agent turn's text, tool
events and end. Both share one entry format, written here and read by the API."""

from __future__ import annotations

import json
import re
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from relay import held, naming, retention
from relay.connections import reply_text, same_server
from relay.retention import DEFAULT_CAPS, Expiry, StreamCaps
from store.limits import (
    CHUNK_BYTES,
    KEPT_OUTPUT_CHARS,
    KIB,
    MAX_BLOCK_MS,
    MAX_STREAMED_TOOL_BYTES,
    MIB,
    REDIS_RETRY_SECONDS,
    REDIS_SOCKET_TIMEOUT_SECONDS,
)

END_KINDS = ("exit",)
TURN_END_KINDS = ("end",)
TEXT_KINDS = ("text", "reasoning")  # a turn's entries that share its stream's text cap
ENTRY_ID = re.compile(r"(\d{1,20})-(\d{1,20})")
MAX_ENTRY_PART = 2**64 - 1
log = structlog.get_logger(__name__)
# Clients whose reads outlast MAX_BLOCK_MS, one per client that asked for a blocking read.
_blocking: weakref.WeakKeyDictionary[redis.Redis, redis.Redis] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Event:
    id: str
    kind: str
    data: dict[str, Any]


class RunStream:
    """The writer side of one run's stream.

    Entries go out in as few round trips as they can: a status set with `status_later` (or output
    with `later`) waits for the next output or the exit and travels in its pipeline;
    `send_pending` sends it alone.
    Writes of others (the owner's events) can ride along the same way with `also`.
    What the stream holds and how long it stays follow `caps` (relay/retention.py).
    """

    def __init__(self, client: redis.Redis, run_id: str, caps: StreamCaps = DEFAULT_CAPS) -> None:
        self.client = client
        self.run_id = run_id
        self.key = naming.run_stream(run_id)
        self.end_key = naming.run_end(run_id)
        self.caps = caps
        self.expiry = Expiry(caps.ttl)
        self.published = 0
        self.capped = False
        self.pending: list[tuple[str, dict[str, Any]]] = []
        self.riders: list[Callable[[Any], object]] = []

    def status(self, state: str, **details: Any) -> str:
        pipe = self._pipeline([("status", {"status": state, **details})], refresh=False)
        status_at = len(pipe) - 1
        self.expiry.refresh(pipe, self.key)
        return reply_text(pipe.execute()[status_at])

    def status_later(self, state: str, **details: Any) -> None:
        """A status to publish with the next entries (see `send_pending`)."""
        self.pending.append(("status", {"status": state, **details}))

    def also(self, add: Callable[[Any], object]) -> None:
        """`add(pipe)` puts more commands on the next pipeline this stream sends."""
        self.riders.append(add)

    def send_pending(self) -> None:
        if self.pending or self.riders:
            self._pipeline([]).execute()

    def output(self, stream: str, data: bytes, later: bool = False) -> None:
        """Publish stdout/stderr bytes in entries of at most CHUNK_BYTES, up to the stream cap;
        the entry that reaches the cap is followed by one stderr note marked `truncated`.

        With `later`, they wait for the next pipeline this stream sends, as a status does.
        """
        if self.capped:
            if not later:
                self.send_pending()
            return
        room = self.caps.output_bytes - self.published
        if len(data) > room:
            data = data[:room]
            self.capped = True
        entries: list[tuple[str, dict[str, Any]]] = [
            (stream, {"text": data[start : start + CHUNK_BYTES].decode("utf-8", "replace")})
            for start in range(0, len(data), CHUNK_BYTES)
        ]
        self.published += len(data)
        if self.capped:
            note = (
                f"[skillfleet: output truncated: the stream keeps its first "
                f"{size_text(self.caps.output_bytes)}; the run keeps the last "
                f"{size_text(KEPT_OUTPUT_CHARS)} of each output]\n"
            )
            entries.append(("stderr", {"text": note, "truncated": True}))
        if later:
            self.pending.extend(entries)
        else:
            self._pipeline(entries).execute()

    def exit(
        self,
        state: str,
        exit_code: int | None,
        run_end: dict[str, Any] | None = None,
        **details: Any,
    ) -> str:
        """The last event of a run; the stream then expires after `caps.ttl` seconds, and it
        counts among the ended streams the housekeeping keeps at most `caps.kept` of.

        The same pipeline writes the run's end key, so a waiter for the end wakes once; with
        `run_end` (the run's result as recorded, broker.runs.run_end, given when its tool call
        was answered with it) the end entry carries it, so that waiter can make the call's
        answer without reading the database.
        """
        data = json.dumps({"status": state, "exit_code": exit_code, **details})
        end = {"kind": "exit", "data": data}
        if run_end is not None:
            end["run"] = json.dumps(run_end)
        pipe = self._pipeline([], refresh=False)
        exit_at = len(pipe)
        pipe.xadd(self.key, {"kind": "exit", "data": data})
        pipe.xadd(self.end_key, end)
        self.expiry.end(pipe, self.key, self.end_key)
        retention.ended(pipe, naming.ended_runs(), self.run_id)
        return reply_text(pipe.execute()[exit_at])

    def _pipeline(self, entries: list[tuple[str, dict[str, Any]]], refresh: bool = True) -> Any:
        """A pipeline adding what is pending, then `entries`, then (with `refresh`) the
        stream's TTL when it is due; the caller executes it."""
        pipe = self.client.pipeline(transaction=False)
        for add in self.riders:  # first: the callers read the later replies as the stream's
            add(pipe)
        self.riders.clear()
        added = [*self.pending, *entries]
        for kind, data in added:
            pipe.xadd(self.key, {"kind": kind, "data": json.dumps(data)})
        self.pending.clear()
        if added and refresh:
            self.expiry.refresh(pipe, self.key)
        return pipe


class TurnStream:
    """The writer side of a turn's stream (the same format as a run's).

    Its text, reasoning and tool payloads are capped as a run's output is (tool and approval
    events always go out, at most a few per call, a payload past the cap as a note), and it
    expires and is kept as a run's stream is (relay/retention.py).
    """

    def __init__(self, client: redis.Redis, turn_id: str, caps: StreamCaps = DEFAULT_CAPS) -> None:
        self.client = client
        self.turn_id = turn_id
        self.key = naming.turn_stream(turn_id)
        self.caps = caps
        self.expiry = Expiry(caps.ttl)
        self.text_bytes = 0
        self.capped = False
        self.held: list[tuple[str, dict[str, Any]]] = []

    def hold(self, kind: str, data: dict[str, Any]) -> None:
        """`kind`'s entry (not text), sent first in the next entry's round trip."""
        self.held.append((kind, data))

    def add(self, kind: str, data: dict[str, Any]) -> None:
        entries = self._capped(kind, data) if kind in TEXT_KINDS else [(kind, data)]
        if not entries and not self.held:
            return
        pipe = self.client.pipeline(transaction=False)
        self._append(pipe, entries)
        self.expiry.refresh(pipe, self.key)
        self._send(pipe, kind)

    def shown(self, value: Any) -> Any:
        """`value` as the stream shows a tool call's arguments or result: whole while it is at
        most MAX_STREAMED_TOOL_BYTES of JSON and fits in what the stream's cap leaves (it counts
        against the cap, as text does), else a note; the call keeps the whole."""
        size = len(json.dumps(value, default=str).encode())
        if size <= MAX_STREAMED_TOOL_BYTES and self.text_bytes + size <= self.caps.output_bytes:
            self.text_bytes += size
            return value
        return {"truncated": True, "bytes": size, "note": "Too large to stream; see the call."}

    def end(self, status: str, error: tuple[str, str] | None) -> None:
        data: dict[str, Any] = {"status": status}
        if error is not None:
            data["error"] = {"code": error[0], "message": error[1]}
        pipe = self.client.pipeline(transaction=False)
        self._append(pipe, [("end", data)])
        self.expiry.end(pipe, self.key)
        retention.ended(pipe, naming.ended_turns(), self.turn_id)
        self._send(pipe, "end")

    def _append(self, pipe: Any, entries: list[tuple[str, dict[str, Any]]]) -> None:
        """The held entries, then `entries`, added to the stream in `pipe`."""
        for kind, data in [*self.held, *entries]:
            pipe.xadd(self.key, {"kind": kind, "data": json.dumps(data, default=str)})
        self.held = []

    def _capped(self, kind: str, data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The text (or reasoning) entry while the stream has room for it; past the cap one
        note, then none."""
        if self.capped:
            return []
        size = len(str(data.get("text", "")).encode())
        if self.text_bytes + size <= self.caps.output_bytes:
            self.text_bytes += size
            return [(kind, data)]
        self.capped = True
        note = (
            f"[skillfleet: text truncated: the stream keeps its first "
            f"{size_text(self.caps.output_bytes)}; the turn keeps the end of its answer]"
        )
        return [("text", {"text": note, "truncated": True})]

    def _send(self, pipe: Any, kind: str) -> None:
        try:
            pipe.execute()
        except redis.RedisError as e:  # the Turn row keeps the answer; the stream is a view
            log.warning("turn event not published", kind=kind, error_type=type(e).__name__)


def size_text(size: int) -> str:
    """`1 MiB`, `64 KiB` or `1500 bytes`: a cap as a note states it."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"


def parse_entry_id(text: str) -> tuple[int, int] | None:
    """`<ms>-<seq>` as two numbers, or None when `text` is not a stream entry id."""
    match = ENTRY_ID.fullmatch(text.strip())
    if match is None:
        return None
    ms, seq = int(match[1]), int(match[2])
    if ms > MAX_ENTRY_PART or seq > MAX_ENTRY_PART:
        return None
    return ms, seq


def last_entry_id(client: redis.Redis, key: str) -> str | None:
    """The id of the newest entry of the stream `key`, None when it is empty or gone."""
    newest: Any = client.xrevrange(key, count=1)
    return reply_text(newest[0][0]) if newest else None


def blocking_client(client: redis.Redis) -> redis.Redis:
    """A client of the same server whose reads outlast the longest block.

    redis-py gives up on a read after `socket_timeout` (5 s by default), so a blocking XREAD of
    15 s on the shared client would report a healthy but quiet Redis as unreachable.
    """
    found = _blocking.get(client)
    if found is None:
        found = same_server(
            client, socket_timeout=MAX_BLOCK_MS / 1000 + REDIS_SOCKET_TIMEOUT_SECONDS
        )
        _blocking[client] = found
    return found


def read_events(
    client: redis.Redis, run_id: str, after: str = "0-0", block_ms: int | None = None
) -> list[Event]:
    """Events after entry id `after`; with `block_ms`, wait up to that long for the first one."""
    return read_stream(client, naming.run_stream(run_id), after, block_ms)


def read_stream(
    client: redis.Redis, key: str, after: str = "0-0", block_ms: int | None = None
) -> list[Event]:
    """Events of the stream `key` after `after` (a run's or a turn's).

    A block is capped at MAX_BLOCK_MS and runs on a client whose socket timeout is longer.
    """
    reader = client
    if block_ms is not None:
        block_ms = max(1, min(block_ms, MAX_BLOCK_MS))
        reader = blocking_client(client)
    reply: Any = reader.xread({key: after}, block=block_ms, count=500)
    events = []
    for _key, entries in reply or []:
        for entry_id, fields in entries:
            events.append(_event(entry_id, fields))
    return events


def follow(
    client: redis.Redis, run_id: str, after: str = "0-0", block_ms: int = MAX_BLOCK_MS
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
    decoded = {reply_text(k): reply_text(v) for k, v in fields.items()}
    return Event(
        reply_text(entry_id), decoded.get("kind", ""), json.loads(decoded.get("data", "{}"))
    )


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


def wait_for_end(client: redis.Redis, run_id: str, timeout: float) -> dict[str, Any] | None:
    """Block until the run's end key holds its exit event, or `timeout` seconds passed.

    Returns the run's end when the end entry carries it (see RunStream.exit), else None: the
    time ran out, or the run's call was not answered with it (the database tells).
    It wakes once, at the end, however much the run prints. A Redis outage is waited out too:
    the caller then reads the run's state from the database. Commands held for this request's
    next round trip (relay.held: the owner's events of the call) go before the first read.
    """
    deadline = time.monotonic() + timeout
    reader = blocking_client(client)
    key = naming.run_end(run_id)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        pipe = reader.pipeline(transaction=False)
        riders = held.take()  # only the first read finds any
        for add in riders:
            add(pipe)
        pipe.xread({key: "0-0"}, count=1, block=max(1, min(MAX_BLOCK_MS, int(left * 1000))))
        try:
            replies = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            if riders:
                log.warning("owner events not published", error=str(e))
            time.sleep(min(left, REDIS_RETRY_SECONDS))
            continue
        reply: Any = replies[-1]
        if isinstance(reply, Exception):
            raise reply
        for failed in (r for r in replies[:-1] if isinstance(r, Exception)):
            log.warning("owner events not published", error=str(failed))
        if reply:
            fields = {reply_text(k): v for k, v in reply[0][1][0][1].items()}
            return json.loads(fields["run"]) if "run" in fields else None

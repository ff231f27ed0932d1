"""Server-Sent Events shared by the run, turn and owner-feed streams: frames, the response, and
where a reconnecting client's Last-Event-ID resumes."""

from __future__ import annotations

import json
from collections.abc import Iterator

import redis
from flask import Response, request, stream_with_context

from api.errors import ApiError
from relay.streams import Event, last_entry_id, parse_entry_id

# A comment line keeps idle connections (and proxies) from timing out.
KEEPALIVE = ": keep-alive\n\n"
FROM_START = "0-0"


def frame(event: Event) -> str:
    """One event as an SSE frame; its `id:` is what a client sends back as Last-Event-ID."""
    return f"id: {event.id}\nevent: {event.kind}\ndata: {json.dumps(event.data)}\n\n"


def event_stream(frames: Iterator[str]) -> Response:
    """A streamed text/event-stream response that proxies neither cache nor buffer."""
    response = Response(stream_with_context(frames), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def resume_after(client: redis.Redis, key: str, stream_of: str) -> str | None:
    """The entry id of stream `key` to replay after, from Last-Event-ID (or ?last_event_id=).

    None when the client sent none. An id that is not a stream entry id answers 400
    `invalid_event_id` before the stream opens. An id past the newest entry (a stream lost with
    a Redis restart, or an id made up) replays the stream from its start rather than waiting
    for entries that will never come. `stream_of` names the stream in the message ("run").
    """
    raw = request.headers.get("Last-Event-ID") or request.args.get("last_event_id")
    if not raw:
        return None
    wanted = parse_entry_id(raw)
    if wanted is None:
        raise ApiError(
            400,
            "invalid_event_id",
            f"Last-Event-ID must be the id of an event of this {stream_of}, "
            "like 1700000000000-0, as sent in the event's `id:` line.",
        )
    newest = last_entry_id(client, key)
    if newest is None or wanted > (parse_entry_id(newest) or (0, 0)):
        return FROM_START
    return f"{wanted[0]}-{wanted[1]}"

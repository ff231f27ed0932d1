"""GET /api/events: the owner's changes as one Server-Sent Events stream; frontends never poll."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from flask import Response, request, stream_with_context
from flask_smorest import Blueprint

from api.auth import owner_or_agent
from api.errors import ApiError
from api.metrics import counted_stream
from api.schemas import sse_response
from api.services import services
from relay import feed
from relay.streams import Event

blp = Blueprint("events", __name__, url_prefix="/api/events", description="Owner event feed")

KEEPALIVE = ": keep-alive\n\n"
STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?")
FEED_DOC = (
    "One `event:` per change, its `id:` the Redis Stream entry id and its `data:` JSON. "
    "Kinds: approval.created, approval.answered, call.finished, run.state, job_run.state. "
    "Reconnect with the Last-Event-ID header (or ?last_event_id=) to replay what you missed; "
    "without one the stream starts with the next change."
)


FEED_EXAMPLE = (
    'id: 1733011200000-0\nevent: approval.created\ndata: {"approval_id": "a41b…", '
    '"status": "pending", "tool": "run_skill_script", "tier": "destructive"}\n\n'
)


@blp.route("")
@blp.response(200, content_type="text/event-stream", description=FEED_DOC)
@blp.doc(responses={"200": sse_response(FEED_DOC, FEED_EXAMPLE)})
def owner_events() -> Response:
    """Your changes as they happen (approvals, calls, runs, job runs), as Server-Sent Events"""
    caller = owner_or_agent()
    after = request.headers.get("Last-Event-ID") or request.args.get("last_event_id") or "$"
    if after != "$" and not STREAM_ID.fullmatch(after):
        raise ApiError(400, "invalid_event_id", f"'{after}' is not an event id of this stream.")
    client = services().redis
    client.ping()  # a feed that can never deliver answers 503 now, not an empty stream
    response = Response(
        stream_with_context(counted_stream("feed", _frames(feed.follow(client, caller, after)))),
        mimetype="text/event-stream",
    )
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def _frames(events: Iterator[Event | None]) -> Iterator[str]:
    # The first frame tells the client the stream is open (and how long to wait to reconnect).
    yield "retry: 1000\n\n"
    for event in events:
        if event is None:
            yield KEEPALIVE
        else:
            yield f"id: {event.id}\nevent: {event.kind}\ndata: {json.dumps(event.data)}\n\n"

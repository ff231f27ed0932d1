"""GET /api/events: the owner's changes as one Server-Sent Events stream; frontends never poll."""

from __future__ import annotations

from flask import Response

from api.auth import owner_only
from api.blueprint import Blueprint
from api.live import hand_off
from api.livejobs import FollowFeed
from api.schemas import sse_response
from api.services import services
from api.sse import resume_after
from relay import naming

blp = Blueprint("events", __name__, url_prefix="/api/events", description="Owner event feed")

FEED_DOC = (
    "One `event:` per change, its `id:` the Redis Stream entry id and its `data:` JSON. "
    "Kinds: approval.created, approval.answered, call.finished, run.state, job_run.state. "
    "Reconnect with the Last-Event-ID header (or ?last_event_id=) to replay what you missed; "
    "without one the stream starts with the next change. An id that is not an entry id answers "
    "400 invalid_event_id; one past the newest entry replays the feed from its start."
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
    caller = owner_only()
    after = resume_after(services().redis, naming.owner_events(caller), "feed") or "$"
    return hand_off(FollowFeed(caller, after))

"""Runs: state and capped output, live events over SSE, and cancelling."""

from __future__ import annotations

from typing import Any

import redis
from flask import Response
from sqlalchemy import select

from api.auth import owner_or_agent
from api.blueprint import Blueprint
from api.live import hand_off
from api.livejobs import FollowRun
from api.livestreams import exit_of
from api.paging import Page, keyset, sql_page
from api.schemas import RunQuerySchema, RunSchema, sse_response
from api.services import services
from api.sse import FROM_START, event_stream, frame, resume_after
from broker.runs import get_run, request_cancel
from relay import naming
from relay.retention import StreamCaps
from relay.streams import (
    Event,
    collected_output,
    read_events,
)
from store.lifecycle.runs import END_STATES
from store.limits import KEPT_OUTPUT_CHARS
from store.models import Chat, Run

blp = Blueprint("runs", __name__, url_prefix="/api/runs", description="Script runs")

RUN_EXAMPLE = 'id: 1733011200000-0\nevent: stdout\ndata: {"text": "line 0\\n"}\n\n'


@blp.route("/<run_id>")
@blp.response(200, RunSchema)
def show_run(run_id: str) -> Run:
    """Show a run: state, exit code, node, skill hash, isolation and output (so far, mid-run)"""
    run = get_run(services().sessions, run_id, owner_or_agent())
    if run.status not in END_STATES:
        # The row gets the output when the run ends; until then it is in the run's stream.
        try:
            stdout, stderr = collected_output(services().redis, run_id)
        except (redis.ConnectionError, redis.TimeoutError):
            return run  # the state still answers while Redis is away; the output waits
        run.stdout, run.stderr = stdout[-KEPT_OUTPUT_CHARS:], stderr[-KEPT_OUTPUT_CHARS:]
    return run


@blp.route("/<run_id>/cancel", methods=["POST"])
@blp.response(202, RunSchema)
def cancel_run(run_id: str) -> Run:
    """Cancel a run: a queued one at once, a running one by killing its process or container"""
    found = services()
    caps = StreamCaps.of(found.settings)
    return request_cancel(found.sessions, found.redis, run_id, owner_or_agent(), caps)


@blp.route("/<run_id>/events")
@blp.response(200, content_type="text/event-stream")
@blp.doc(responses={"200": sse_response("stdout, stderr, status and exit events", RUN_EXAMPLE)})
def run_events(run_id: str) -> Response:
    """Live output as Server-Sent Events; reconnect with Last-Event-ID to replay what you missed"""
    run = get_run(services().sessions, run_id, owner_or_agent())
    client = services().redis
    after = resume_after(client, naming.run_stream(run_id), "run") or FROM_START
    if run.status in END_STATES and not read_events(client, run_id, FROM_START):
        return event_stream(iter(_from_row(run)))  # the stream expired; the row remains
    return hand_off(FollowRun(run_id, after))


def _from_row(run: Run) -> list[str]:
    """Events rebuilt from the Run row, for a run whose stream expired after an hour."""
    frames = []
    for index, (kind, text) in enumerate((("stdout", run.stdout), ("stderr", run.stderr)), 1):
        if text:
            frames.append(frame(Event(f"0-{index}", kind, {"text": text})))
    frames.append(frame(exit_of(run)))
    return frames


@blp.route("")
@blp.arguments(RunQuerySchema(), location="query")
@blp.response(200, RunSchema(many=True))
@keyset(blp)
def list_runs(query: dict[str, Any], page: Page) -> list[Run]:
    """List your runs, newest first; filter by status, skill, node, chat and since"""
    caller = owner_or_agent()
    statement = select(Run).where(Run.owner_id == caller)
    if "status" in query:
        statement = statement.where(Run.status == query["status"])
    if "skill" in query:
        statement = statement.where(Run.skill_name == query["skill"])
    if "node" in query:
        statement = statement.where(Run.node == query["node"])
    if "since" in query:
        statement = statement.where(Run.created_at >= query["since"])
    if "chat" in query:
        # Equal to one chat's id (not IN a set): the runs' chat index gives its runs in order.
        chat = select(Chat.id).where(Chat.owner_id == caller, Chat.external_id == query["chat"])
        statement = statement.where(Run.chat_id == chat.scalar_subquery())
    with services().sessions() as session:
        return sql_page(session, statement, page, caller, (Run.created_at, Run.id))

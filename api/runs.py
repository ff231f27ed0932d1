"""Runs: state and capped output, live events over SSE, and cancelling."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from flask import Response, request, stream_with_context
from flask_smorest import Blueprint

from api.auth import owner_or_agent
from api.metrics import SSE_STREAMS_OPEN
from api.schemas import RunSchema
from api.services import services
from store.models import Run
from workers.runs import END_STATES, get_run, request_cancel
from workers.streams import Event, follow, read_events

blp = Blueprint("runs", __name__, url_prefix="/api/runs", description="Script runs")

# A comment line keeps idle connections (and proxies) from timing out.
KEEPALIVE = ": keep-alive\n\n"


@blp.route("/<run_id>")
@blp.response(200, RunSchema)
def show_run(run_id: str) -> Run:
    """Show a run: state, exit code, node, skill hash, isolation and capped output"""
    return get_run(services().sessions, run_id, owner_or_agent())


@blp.route("/<run_id>/cancel", methods=["POST"])
@blp.response(202, RunSchema)
def cancel_run(run_id: str) -> Run:
    """Cancel a run: a queued one at once, a running one by killing its process or container"""
    return request_cancel(services().sessions, services().redis, run_id, owner_or_agent())


@blp.route("/<run_id>/events")
@blp.response(200, content_type="text/event-stream")
def run_events(run_id: str) -> Response:
    """Live output as Server-Sent Events; reconnect with Last-Event-ID to replay what you missed"""
    run = get_run(services().sessions, run_id, owner_or_agent())
    after = request.headers.get("Last-Event-ID") or request.args.get("last_event_id") or "0-0"
    client = services().redis
    if run.status in END_STATES and not read_events(client, run_id, "0-0"):
        events: Iterator[str] = iter(_from_row(run))  # the stream expired; the row remains
    else:
        events = _from_stream(client, run_id, after)
    response = Response(stream_with_context(events), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    return response


def _from_stream(client: Any, run_id: str, after: str) -> Iterator[str]:
    SSE_STREAMS_OPEN.inc()
    try:
        for event in follow(client, run_id, after):
            yield KEEPALIVE if event is None else _sse(event)
    finally:  # the client went away or the run ended
        SSE_STREAMS_OPEN.dec()


def _sse(event: Event) -> str:
    return f"id: {event.id}\nevent: {event.kind}\ndata: {json.dumps(event.data)}\n\n"


def _from_row(run: Run) -> list[str]:
    """Events rebuilt from the Run row, for a run whose stream expired after an hour."""
    frames = []
    for index, (kind, text) in enumerate((("stdout", run.stdout), ("stderr", run.stderr)), 1):
        if text:
            frames.append(_sse(Event(f"0-{index}", kind, {"text": text})))
    end = {"status": run.status, "exit_code": run.exit_code, "error": run.error}
    frames.append(_sse(Event("0-3", "exit", end)))
    return frames

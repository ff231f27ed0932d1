"""Runs: state and capped output, live events over SSE, and cancelling."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import redis
from flask import Response
from flask_smorest.pagination import PaginationParameters
from sqlalchemy import select

from api.auth import owner_or_agent
from api.blueprint import Blueprint
from api.metrics import counted_stream
from api.paging import paginate, sql_page
from api.schemas import RunQuerySchema, RunSchema, sse_response
from api.services import services
from api.sse import FROM_START, KEEPALIVE, event_stream, frame, resume_after
from relay import naming
from relay.streams import (
    Event,
    collected_output,
    follow,
    read_events,
)
from store.db import SessionFactory
from store.limits import KEPT_OUTPUT_CHARS, REDIS_RETRY_SECONDS, SSE_KEEPALIVE_SECONDS
from store.models import Chat, Run, ToolCall
from store.runs import END_STATES, get_run, request_cancel

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
    return request_cancel(services().sessions, services().redis, run_id, owner_or_agent())


@blp.route("/<run_id>/events")
@blp.response(200, content_type="text/event-stream")
@blp.doc(responses={"200": sse_response("stdout, stderr, status and exit events", RUN_EXAMPLE)})
def run_events(run_id: str) -> Response:
    """Live output as Server-Sent Events; reconnect with Last-Event-ID to replay what you missed"""
    sessions = services().sessions
    run = get_run(sessions, run_id, owner_or_agent())
    client = services().redis
    after = resume_after(client, naming.run_stream(run_id), "run") or FROM_START
    if run.status in END_STATES and not read_events(client, run_id, FROM_START):
        events: Iterator[str] = iter(_from_row(run))  # the stream expired; the row remains
    else:
        events = counted_stream("run", _events_until_end(sessions, client, run, after))
    return event_stream(events)


def _events_until_end(
    sessions: SessionFactory, client: redis.Redis, run: Run, after: str
) -> Iterator[str]:
    """Stream events until the exit event; the client always gets the run's final state.

    A quiet run gets a comment every SSE_KEEPALIVE_SECONDS. A Redis outage keeps the connection
    open and resumes after the last event sent; a run that ended without its exit event in the
    stream (the stream was lost with Redis) ends with the state recorded in its row.
    """
    last_sent = time.monotonic()
    while True:
        try:
            for event in follow(client, run.id, after):
                if event is not None:
                    after = event.id
                    last_sent = time.monotonic()
                    yield frame(event)
                    continue
                ended = _ended(sessions, run.id)
                if ended is not None:
                    yield from _finish_from_row(client, ended, after)
                    return
                last_sent = time.monotonic()
                yield KEEPALIVE
            return
        except (redis.ConnectionError, redis.TimeoutError):
            ended = _ended(sessions, run.id)
            if ended is not None:
                yield frame(_exit_of(ended))
                return
            if time.monotonic() - last_sent >= SSE_KEEPALIVE_SECONDS:
                last_sent = time.monotonic()
                yield KEEPALIVE
            time.sleep(REDIS_RETRY_SECONDS)


def _ended(sessions: SessionFactory, run_id: str) -> Run | None:
    run = get_run(sessions, run_id)
    return run if run.status in END_STATES else None


def _finish_from_row(client: redis.Redis, run: Run, after: str) -> Iterator[str]:
    """What the stream still holds after `after`, then the row's end if the stream lacks it."""
    for event in read_events(client, run.id, after):
        yield frame(event)
        if event.kind == "exit":
            return
    yield frame(_exit_of(run))


def _exit_of(run: Run) -> Event:
    end = {"status": run.status, "exit_code": run.exit_code, "error": run.error}
    return Event("0-3", "exit", end)


def _from_row(run: Run) -> list[str]:
    """Events rebuilt from the Run row, for a run whose stream expired after an hour."""
    frames = []
    for index, (kind, text) in enumerate((("stdout", run.stdout), ("stderr", run.stderr)), 1):
        if text:
            frames.append(frame(Event(f"0-{index}", kind, {"text": text})))
    frames.append(frame(_exit_of(run)))
    return frames


@blp.route("")
@blp.arguments(RunQuerySchema(), location="query")
@blp.response(200, RunSchema(many=True))
@paginate(blp)
def list_runs(query: dict[str, Any], pagination_parameters: PaginationParameters) -> list[Run]:
    """List your runs, newest first; filter by status, skill, node, chat and since"""
    statement = select(Run).where(Run.owner_id == owner_or_agent())
    if "status" in query:
        statement = statement.where(Run.status == query["status"])
    if "skill" in query:
        statement = statement.where(Run.skill_name == query["skill"])
    if "node" in query:
        statement = statement.where(Run.node == query["node"])
    if "since" in query:
        statement = statement.where(Run.created_at >= query["since"])
    if "chat" in query:
        chat_calls = (
            select(ToolCall.id).join(Chat, ToolCall.chat_id == Chat.id)
            .where(Chat.external_id == query["chat"])
        )  # fmt: skip
        statement = statement.where(Run.call_id.in_(chat_calls))
    with services().sessions() as session:
        newest_first = statement.order_by(Run.created_at.desc(), Run.id.desc())
        return sql_page(session, newest_first, pagination_parameters)

"""Agent turns: a prompt answered by the owner's model calling the governed tools."""

from __future__ import annotations

from typing import Any

import kombu.exceptions
import marshmallow as ma
import redis
from flask import Response

from api.auth import owner_or_agent
from api.blueprint import Blueprint
from api.live import hand_off
from api.livejobs import FollowTurn
from api.schemas import TURN_STATES, sse_response, status_field
from api.services import Services, services
from api.sse import FROM_START, event_stream, frame, resume_after
from broker.calls import MODES
from relay import naming
from relay.dispatch import send_turn
from relay.errors import BackendUnavailable, NoModel, TurnActive, TurnFinished, TurnNotFound
from relay.retention import StreamCaps
from relay.streams import Event, TurnStream, read_stream
from store import modelsettings
from store.db import SessionFactory, transaction
from store.lifecycle import turns as turnstates
from store.limits import MAX_ID_CHARS, MAX_PROMPT_CHARS
from store.models import Turn
from store.secrets import Sealer
from store.states import TurnStatus

TURN_EXAMPLE = 'id: 1733011200000-0\nevent: text\ndata: {"text": "Checking the disk."}\n\n'
blp = Blueprint("turns", __name__, url_prefix="/api/turns", description="Agent turns")
UNREACHABLE = "The control queue (Redis) can't be reached, so the turn was not started."
NO_MODEL = "No model is configured: the owner sets one with PUT /api/settings/model."


class TurnRequestSchema(ma.Schema):
    chat_id = ma.fields.String(required=True, validate=ma.validate.Length(min=1, max=MAX_ID_CHARS))
    prompt = ma.fields.String(
        required=True, validate=ma.validate.Length(min=1, max=MAX_PROMPT_CHARS)
    )
    mode = ma.fields.String(load_default="execute", validate=ma.validate.OneOf(MODES))


class TurnSchema(ma.Schema):
    turn_id = ma.fields.String(attribute="id")
    chat_id = ma.fields.String(allow_none=True)
    job_run_id = ma.fields.String(allow_none=True)
    mode = ma.fields.String()
    status = status_field(TURN_STATES)
    text = ma.fields.String(allow_none=True, metadata={"description": "The model's answer"})
    calls = ma.fields.Integer(metadata={"description": "Tool calls the turn made"})
    error_code = ma.fields.String(allow_none=True)
    error_message = ma.fields.String(allow_none=True)
    created_at = ma.fields.DateTime()
    started_at = ma.fields.DateTime(allow_none=True)
    finished_at = ma.fields.DateTime(allow_none=True)


@blp.route("", methods=["POST"])
@blp.arguments(TurnRequestSchema())
@blp.response(202, TurnSchema)
def start_turn(body: dict[str, Any]) -> Turn:
    """Start a turn in a chat; it runs on the control worker and streams at /events"""
    caller = owner_or_agent()
    found = services()
    sealer = Sealer(found.settings.keys_dir)
    if modelsettings.load(found.sessions, sealer, caller) is None:
        raise NoModel(NO_MODEL)
    with transaction(found.sessions) as session:
        active = turnstates.open_turn(session.connection(), caller, body["chat_id"])
        if active is not None:
            raise TurnActive(f"The chat already has a turn that has not ended ({active}).")
        turn = turnstates.create(
            session, caller, body["prompt"], body["chat_id"], mode=body["mode"]
        )
    send(found, turn.id)
    return _turn(found.sessions, turn.id)


def send(found: Services, turn_id: str) -> None:
    """Queue a created turn for the control worker; one that can't be queued fails (503)."""
    try:
        send_turn(found.celery, turn_id)
    except (redis.RedisError, kombu.exceptions.OperationalError) as e:
        with transaction(found.sessions) as session:
            turnstates.abandon(session, turn_id, BackendUnavailable.code, UNREACHABLE)
        raise BackendUnavailable(UNREACHABLE) from e


@blp.route("/<turn_id>")
@blp.response(200, TurnSchema)
def show_turn(turn_id: str) -> Turn:
    """Show a turn: state, the model's answer, how many tool calls it made"""
    return _turn(services().sessions, turn_id, owner_or_agent())


@blp.route("/<turn_id>/stop", methods=["POST"])
@blp.response(202, TurnSchema)
def stop_turn(turn_id: str) -> Turn:
    """Stop a turn: a queued one at once, a running one at its next step"""
    found = services()
    turn = _turn(found.sessions, turn_id, owner_or_agent())
    if turn.status not in turnstates.OPEN_STATES:
        raise TurnFinished(f"The turn already ended: it is {turn.status}.")
    with transaction(found.sessions) as session:
        stopped = turnstates.stop_queued(session, turn_id)
    if stopped:
        TurnStream(found.redis, turn_id, StreamCaps.of(found.settings)).end(
            TurnStatus.STOPPED, ("stopped", "Stopped before it started.")
        )
    else:
        found.redis.set(naming.turn_stop(turn_id), "1", ex=found.settings.turn_timeout + 60)
    return _turn(found.sessions, turn_id)


@blp.route("/<turn_id>/events")
@blp.response(200, content_type="text/event-stream")
@blp.doc(responses={"200": sse_response("The turn's text and tool events", TURN_EXAMPLE)})
def turn_events(turn_id: str) -> Response:
    """Text and tool events as Server-Sent Events; reconnect with Last-Event-ID to replay"""
    turn = _turn(services().sessions, turn_id, owner_or_agent())
    client = services().redis
    key = naming.turn_stream(turn_id)
    after = resume_after(client, key, "turn") or FROM_START
    if turn.status not in turnstates.OPEN_STATES and not read_stream(client, key, FROM_START):
        return event_stream(iter(_from_row(turn)))  # the stream expired; the row remains
    return hand_off(FollowTurn(turn_id, after))


def _turn(sessions: SessionFactory, turn_id: str, owner_id: int | None = None) -> Turn:
    with sessions() as session:
        turn = session.get(Turn, turn_id)
    if turn is None or (owner_id is not None and turn.owner_id != owner_id):
        raise TurnNotFound(f"You have no turn '{turn_id}'.")
    return turn


def _from_row(turn: Turn) -> list[str]:
    """Events rebuilt from the Turn row, for a turn whose stream expired after an hour."""
    frames = []
    if turn.text:
        frames.append(frame(Event("0-1", "text", {"text": turn.text})))
    end: dict[str, Any] = {"status": turn.status}
    if turn.error_code:
        end["error"] = {"code": turn.error_code, "message": turn.error_message or ""}
    frames.append(frame(Event("0-2", "end", end)))
    return frames

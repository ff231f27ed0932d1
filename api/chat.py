"""The AI SDK's chat transport: `POST /api/chat` as `DefaultChatTransport` sends it, answered with
the UI message stream protocol (api/chatstream.py), and `GET /api/chat/<id>/stream` to resume.

A chat request is a turn (api/turns.py) in the chat `id`: its calls, grants and limits are the
broker's, as every turn's. The client sends its whole history; the server's history is the one
the model gets, and a client whose messages differ from it is told so (a `data-history` part
and the header `X-Skillfleet-History: server`). A regenerate starts a turn on the same prompt
and marks the answered turn, and every later one, replaced: the chat keeps one answer.
"""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import Response
from sqlalchemy import select

from api.auth import owner_only
from api.blueprint import Blueprint
from api.chatmessages import (
    DIFFERS,
    as_messages,
    differs,
    outline,
    prompt_of,
    regenerated,
    replace_from,
)
from api.chatstream import HEADERS
from api.live import hand_off
from api.livejobs import FollowChat
from api.roles import owner_route
from api.schemas import sse_response
from api.services import Services, services
from api.turns import NO_MODEL, send
from broker.calls import MODES
from broker.errors import ChatNotFound
from relay.errors import NoModel, TurnActive
from relay.retention import StreamCaps
from relay.streams import TurnStream
from store import modelsettings
from store.db import transaction
from store.lifecycle import turns as turnstates
from store.limits import MAX_CHAT_MESSAGES, MAX_CHAT_SHOWN_TURNS, MAX_ID_CHARS
from store.models import Turn

SUBMIT, REGENERATE = "submit-message", "regenerate-message"
TRIGGERS = (SUBMIT, REGENERATE)
ROLES = ("system", "user", "assistant")
HISTORY_HEADER = "X-Skillfleet-History"
TURN_HEADER = "X-Skillfleet-Turn"
CHAT_EXAMPLE = (
    'data: {"type":"start","messageId":"6f1c...","messageMetadata":{"turnId":"6f1c..."}}\n\n'
    'data: {"type":"start-step"}\n\n'
    'data: {"type":"text-start","id":"text-1"}\n\n'
    'data: {"type":"text-delta","id":"text-1","delta":"Checking the disk."}\n\n'
    'data: {"type":"text-end","id":"text-1"}\n\n'
    'data: {"type":"finish-step"}\n\n'
    'data: {"type":"finish","finishReason":"stop","messageMetadata":{"turnId":"6f1c...",'
    '"status":"succeeded"}}\n\n'
    "data: [DONE]\n\n"
)
blp = Blueprint("chat", __name__, url_prefix="/api/chat", description="The AI SDK's chat transport")


def printable(text: str) -> None:
    if not text.isprintable():
        raise ma.ValidationError("Must hold no control characters.")


class PartSchema(ma.Schema):
    class Meta:
        unknown = ma.INCLUDE  # a part's fields follow its type (the AI SDK's UIMessagePart)

    type = ma.fields.String(required=True, validate=ma.validate.Length(1, 200))


class MessageSchema(ma.Schema):
    class Meta:
        unknown = ma.INCLUDE  # metadata, as the client keeps it

    id = ma.fields.String(required=True, validate=[ma.validate.Length(1, MAX_ID_CHARS), printable])
    role = ma.fields.String(required=True, validate=ma.validate.OneOf(ROLES))
    parts = ma.fields.List(ma.fields.Nested(PartSchema), required=True)


class ChatRequestSchema(ma.Schema):
    class Meta:
        unknown = ma.EXCLUDE  # a transport's `body` option adds fields of the frontend's own

    id = ma.fields.String(
        required=True,
        validate=[ma.validate.Length(1, MAX_ID_CHARS), printable],
        metadata={"description": "The chat's id (the frontend's)"},
    )
    messages = ma.fields.List(
        ma.fields.Nested(MessageSchema),
        required=True,
        validate=ma.validate.Length(1, MAX_CHAT_MESSAGES),
        metadata={"description": "The client's messages; the last user message is the prompt"},
    )
    trigger = ma.fields.String(load_default=SUBMIT, validate=ma.validate.OneOf(TRIGGERS))
    messageId = ma.fields.String(  # noqa: N815 - the transport's name
        load_default=None,
        allow_none=True,
        validate=[ma.validate.Length(1, MAX_ID_CHARS), printable],
        metadata={"description": "The message to regenerate (the last answer when absent)"},
    )
    mode = ma.fields.String(load_default="execute", validate=ma.validate.OneOf(MODES))


@blp.route("", methods=["POST"])
@owner_route
@blp.arguments(ChatRequestSchema())
@blp.response(200, content_type="text/event-stream")
@blp.doc(responses={"200": sse_response("The answer as a UI message stream", CHAT_EXAMPLE)})
def chat(body: dict[str, Any]) -> Response:
    """Answer a chat message (or regenerate an answer) as the AI SDK's UI message stream"""
    caller = owner_only()
    found = services()
    start = _regenerate if body["trigger"] == REGENERATE else _submit
    turn_id, differed = start(found, caller, body)
    if differed:
        notice = {"status": "server", "message": DIFFERS.format(chat=body["id"])}
        TurnStream(found.redis, turn_id, StreamCaps.of(found.settings)).add("history", notice)
    send(found, turn_id)
    headers = {TURN_HEADER: turn_id, **({HISTORY_HEADER: "server"} if differed else {})}
    return _streamed(turn_id, headers)


@blp.route("/<chat_id>/stream")
@owner_route
@blp.response(200, content_type="text/event-stream")
@blp.alt_response(204, description="The chat has no answer streaming now")
@blp.doc(responses={"200": sse_response("The open answer, from its start", CHAT_EXAMPLE)})
def resume(chat_id: str) -> Response:
    """Resume the chat's answer that is still streaming; 204 when none is"""
    caller = owner_only()
    found = services()
    with found.sessions() as session:
        known = chat_id.isprintable() and session.scalar(
            select(Turn.id).where(Turn.owner_id == caller, Turn.chat_id == chat_id).limit(1)
        )
        open_id = turnstates.open_turn(session.connection(), caller, chat_id) if known else None
    if not known:
        raise ChatNotFound(f"You have no chat '{chat_id}'.")
    if open_id is None:
        return Response(status=204)
    return _streamed(open_id, {TURN_HEADER: open_id})


def _streamed(turn_id: str, headers: dict[str, str]) -> Response:
    response = hand_off(FollowChat(turn_id))
    response.headers.update({**HEADERS, **headers})
    return response


def _submit(found: Services, owner_id: int, body: dict[str, Any]) -> tuple[str, bool]:
    """A turn answering the last message; whether the earlier ones differ from the server's."""
    chat_id, messages = body["id"], body["messages"]
    prompt = prompt_of(messages[-1])
    with transaction(found.sessions) as session:
        _can_start(session, owner_id, chat_id)
        shown = outline(session, owner_id, chat_id)
        differed = differs(messages[:-1], shown, len(shown) < 2 * MAX_CHAT_SHOWN_TURNS)
        # An id the history holds already (an edited message) is not given twice.
        new_id = messages[-1]["id"]
        prompt_id = None if any(m["id"] == new_id for m in shown) else new_id
        turn = turnstates.create(
            session, owner_id, prompt, chat_id, mode=body["mode"], prompt_id=prompt_id
        )
        found.broker.make_chat(session, owner_id, chat_id)  # GET /api/chats/<id> shows it
    return turn.id, differed


def _regenerate(found: Services, owner_id: int, body: dict[str, Any]) -> tuple[str, bool]:
    """A turn on the prompt of the answer named, which it and every later answer leave for."""
    chat_id = body["id"]
    with transaction(found.sessions) as session:
        _can_start(session, owner_id, chat_id)
        target = regenerated(session, owner_id, chat_id, body["messageId"])
        held = outline(session, owner_id, chat_id, before=target.created_at)
        expected = [*held, as_messages([target])[0]]
        differed = differs(body["messages"], expected, len(held) < 2 * MAX_CHAT_SHOWN_TURNS)
        turn = turnstates.create(
            session, owner_id, target.prompt, chat_id, mode=body["mode"],
            prompt_id=target.prompt_id,
        )  # fmt: skip
        replace_from(session, target, turn.id)
        found.broker.make_chat(session, owner_id, chat_id)
    return turn.id, differed


def _can_start(session: Any, owner_id: int, chat_id: str) -> None:
    """Refuse a turn without a model (in the turn's transaction: no session of its own before
    it), or in a chat whose answer has not ended."""
    connection = session.connection()
    if not modelsettings.configured(connection, owner_id):
        raise NoModel(NO_MODEL)
    active = turnstates.open_turn(connection, owner_id, chat_id)
    if active is not None:
        raise TurnActive(f"The chat already has an answer that has not ended (turn {active}).")

"""Chats: their issue counts, their history, their grants, and forgetting them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select

from api.auth import owner_only
from api.blueprint import Blueprint
from api.chatmessages import as_messages, kept_turns
from api.paging import Page, keyset, memory_page, sql_page
from api.roles import owner_route
from api.schemas import ChatHistorySchema, ChatSchema, GrantSchema
from api.services import services
from broker.errors import ChatNotFound
from broker.grants import CHAT
from store.db import transaction
from store.models import Chat, Grant, Turn

blp = Blueprint("chats", __name__, url_prefix="/api/chats", description="Chats")
SHOWN = ("external_id", "declined_calls", "expired_calls", "failed_calls", "timed_out_calls",
         "created_at")  # fmt: skip


def _chat(owner_id: int, chat_id: str) -> Chat:
    with services().sessions() as session:
        chat = session.scalar(
            select(Chat).where(Chat.owner_id == owner_id, Chat.external_id == chat_id)
        )
    if chat is None:
        raise ChatNotFound(f"You have no chat '{chat_id}'.")
    return chat


@blp.route("")
@owner_route
@blp.response(200, ChatSchema(many=True))
@keyset(blp)
def list_chats(page: Page) -> list[Chat]:
    """List your chats, newest first, with their declined, expired, failed and timed-out call
    counts"""
    caller = owner_only()
    with services().sessions() as session:
        mine = select(Chat).where(Chat.owner_id == caller)
        return sql_page(session, mine, page, caller, (Chat.created_at, Chat.id))


@blp.route("/<chat_id>")
@blp.response(200, ChatHistorySchema)
def get_chat(chat_id: str) -> dict[str, Any]:
    """Show one chat: its call counts and its history as the AI SDK's UI messages"""
    caller = owner_only()
    chat = _chat(caller, chat_id)
    with services().sessions() as session:
        messages = as_messages(kept_turns(session, caller, chat_id))
    shown = {column: getattr(chat, column) for column in SHOWN}
    return {**shown, "messages": messages}


@blp.route("/<chat_id>", methods=["DELETE"])
@blp.response(204)
def delete_chat(chat_id: str) -> None:
    """Delete a chat; its history, grants, activations, calls and approvals go with it"""
    caller = owner_only()
    chat = _chat(caller, chat_id)
    with transaction(services().sessions) as session:
        session.execute(delete(Grant).where(Grant.chat_id == chat.id))
        session.execute(delete(Turn).where(Turn.owner_id == caller, Turn.chat_id == chat_id))
        session.execute(delete(Chat).where(Chat.id == chat.id))


@blp.route("/<chat_id>/grants")
@owner_route
@blp.response(200, GrantSchema(many=True))
@keyset(blp)
def chat_grants(chat_id: str, page: Page) -> list[Grant]:
    """List the grant keys the owner gave this chat ("approve for this chat")"""
    caller = owner_only()
    chat = _chat(caller, chat_id)
    with services().sessions() as session:
        query = select(Grant).where(Grant.scope == CHAT, Grant.chat_id == chat.id)
        grants = list(session.scalars(query.order_by(Grant.key, Grant.id)))
    return memory_page(grants, page, caller, lambda g: (g.key, g.id))

"""Tool calls: their recorded outcomes, listed with filters or one at a time (can be waited for)."""

from __future__ import annotations

from typing import Any

from flask import Response
from sqlalchemy import select

from api.auth import owner_or_agent
from api.blueprint import Blueprint
from api.live import hand_off
from api.livejobs import WaitCall
from api.paging import Page, keyset, sql_page
from api.schemas import CallQuerySchema, CallSchema, WaitSchema
from api.services import services
from broker.calls import OPEN_STATES
from broker.errors import NotWaiting
from store.models import Chat, ToolCall
from store.states import CallStatus

blp = Blueprint("calls", __name__, url_prefix="/api/calls", description="Tool call outcomes")


@blp.route("")
@blp.arguments(CallQuerySchema(), location="query")
@blp.response(200, CallSchema(many=True))
@keyset(blp)
def list_calls(query: dict[str, Any], page: Page) -> list[ToolCall]:
    """List your tool calls, newest first; filter by status, tool, skill, node, chat and since"""
    caller = owner_or_agent()
    statement = select(ToolCall).where(ToolCall.owner_id == caller)
    for field, column in (
        ("status", ToolCall.status),
        ("tool", ToolCall.tool),
        ("skill", ToolCall.skill_name),
        ("node", ToolCall.node),
    ):
        if field in query:
            statement = statement.where(column == query[field])
    if "since" in query:
        statement = statement.where(ToolCall.created_at >= query["since"])
    if "chat" in query:
        # Equal to one chat's id (not IN a set): the chat's index gives its calls in order.
        chat = select(Chat.id).where(Chat.owner_id == caller, Chat.external_id == query["chat"])
        statement = statement.where(ToolCall.chat_id == chat.scalar_subquery())
    with services().sessions() as session:
        return sql_page(session, statement, page, caller, (ToolCall.created_at, ToolCall.id))


@blp.route("/<call_id>")
@blp.arguments(WaitSchema(), location="query")
@blp.response(200, CallSchema)
def get_call(query: dict[str, Any], call_id: str) -> ToolCall | Response:
    """Show one tool call's outcome; `?wait=S` waits for an end state"""
    caller = owner_or_agent()
    call = services().broker.get_call(caller, call_id)
    if query["wait"] <= 0 or call.status not in OPEN_STATES:
        return call
    run_id = call.run_id if call.status == CallStatus.RUNNING else None
    job = WaitCall(caller, call_id, run_id, query["wait"], "call", not query["keep_pending"])
    return hand_off(job)


@blp.route("/<call_id>/withdraw", methods=["POST"])
@blp.response(200, CallSchema)
def withdraw_call(call_id: str) -> ToolCall:
    """Stop waiting for the owner: withdraw the call's pending approval, so nothing runs"""
    caller = owner_or_agent()
    broker = services().broker
    broker.get_call(caller, call_id)  # 404 for a call that is not the caller's owner's
    if broker.withdraw(caller, call_id) is None:
        raise NotWaiting(
            "This call is not waiting for the owner's approval (it was answered, expired or "
            "withdrawn already): there is nothing to withdraw."
        )
    return broker.get_call(caller, call_id)

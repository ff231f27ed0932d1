"""Chat review for /create-skill: which chats went badly, what happened in them, what was seen.

The broker counts each chat's declined, expired, failed and timed-out calls as they end
(broker/callstate.py); these tools read the counts and the calls, and record reviewed chats
(at most MAX_REVIEWED_CHATS per owner, the oldest dropped) so the next review skips them.

They are read tools, open to an agent token like every tool, so an agent reads every chat's calls
with their arguments and results although the chat routes refuse it: the authoring loop needs
them to learn from chats that went badly. No grant is ever part of what they return.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from broker.context import ToolContext
from broker.errors import ChatNotFound, InvalidCall
from broker.registry import Tool
from broker.results import json_size, shape_result
from broker.tiers import Tier
from store.limits import (
    MAX_LISTED_CHATS,
    MAX_REVIEWED_CHATS,
    MAX_TRANSCRIPT_CALLS,
    RESULT_CAP,
)
from store.models import Chat, ChatReview, ToolCall, utcnow
from store.names import is_valid_name

# What read_chat_transcript cuts, when it must, to fit the whole transcript in RESULT_CAP.
CUT_PARTS = ("arguments", "result")
TRANSCRIPT_CUT = f"[skillfleet: cut to fit the transcript in {RESULT_CAP // 1024} KB.]"


def issues(chat: Chat) -> int:
    return chat.declined_calls + chat.expired_calls + chat.failed_calls + chat.timed_out_calls


def list_chats(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The owner's chats, newest first, with their issue counts and whether they were reviewed."""
    only_unreviewed = arguments.get("only_unreviewed", False)
    if not isinstance(only_unreviewed, bool):
        raise InvalidCall("HOST: only_unreviewed must be true or false.")
    query = (
        select(Chat, ChatReview.skill_name, ChatReview.id)
        .outerjoin(
            ChatReview,
            (ChatReview.chat_id == Chat.id) & (ChatReview.owner_id == context.owner_id),
        )
        .where(Chat.owner_id == context.owner_id)
        .order_by(Chat.created_at.desc(), Chat.id.desc())
        .limit(MAX_LISTED_CHATS)
    )
    if only_unreviewed:
        query = query.where(ChatReview.id.is_(None))
    with context.sessions() as session:
        rows = session.execute(query).all()
    chats = [
        {
            "chat_id": chat.external_id,
            "created_at": chat.created_at.isoformat(),
            "declined": chat.declined_calls,
            "expired": chat.expired_calls,
            "failed": chat.failed_calls,
            "timed_out": chat.timed_out_calls,
            "issues": issues(chat),
            "reviewed": review_id is not None,
            "reviewed_for": skill_name,
        }
        for chat, skill_name, review_id in rows
    ]
    return {"chats": chats, "count": len(chats)}


def read_chat_transcript(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """One chat's calls in order: tool, arguments, status, error and result, all in 48 KB."""
    chat_id = arguments.get("chat_id")
    if not isinstance(chat_id, str) or not chat_id:
        raise InvalidCall("HOST: chat_id must name a chat, as list_chats gives it.")
    with context.sessions() as session:
        chat = _chat(session, context.owner_id, chat_id)
        latest = (
            select(ToolCall)
            .where(ToolCall.chat_id == chat.id, ToolCall.owner_id == context.owner_id)
            .order_by(ToolCall.created_at.desc(), ToolCall.id.desc())
            .limit(MAX_TRANSCRIPT_CALLS)
        )
        calls = list(reversed(list(session.scalars(latest))))
    entries = []
    for call in calls:
        entry: dict[str, Any] = {
            "tool": call.tool,
            "arguments": call.arguments,
            "status": call.status,
            "created_at": call.created_at.isoformat(),
        }
        if call.error_code:
            entry["error"] = {"code": call.error_code, "message": call.error_message or ""}
        if call.result is not None:
            entry["result"] = call.result
        entries.append(entry)
    transcript = {
        "chat_id": chat_id,
        "issues": issues(chat),
        "calls": entries,
        "count": len(entries),
    }
    _fit_transcript(transcript, entries)
    return transcript


def _fit_transcript(transcript: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    """Redact each call's arguments and result, and cut them so the whole transcript fits
    RESULT_CAP: a transcript over it would reach the model as one cut text, its calls lost.

    The small ones stay whole; the larger ones share what is left equally.
    """
    parts: list[tuple[dict[str, Any], str, Any]] = []
    for entry in entries:
        for key in CUT_PARTS:
            if key in entry:
                parts.append((entry, key, entry[key]))
                entry[key] = None  # measured without them, the transcript leaves them the rest
    left = RESULT_CAP - json_size(transcript) + len(parts) * json_size(None)
    parts.sort(key=lambda part: json_size(part[2]))
    for index, (entry, key, value) in enumerate(parts):
        share = max(0, left) // (len(parts) - index)
        entry[key] = shape_result(value, cap=share, note=TRANSCRIPT_CUT)
        left -= json_size(entry[key])


def mark_chats_reviewed(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Record chats as reviewed (optionally for the skill drafted from them)."""
    chat_ids = arguments.get("chat_ids")
    if (
        not isinstance(chat_ids, list)
        or not chat_ids
        or not all(isinstance(c, str) and c for c in chat_ids)
    ):
        raise InvalidCall("HOST: chat_ids must be a non-empty list of chat ids.")
    if len(chat_ids) > MAX_REVIEWED_CHATS:
        raise InvalidCall(f"HOST: mark at most {MAX_REVIEWED_CHATS} chats at once.")
    skill_name = arguments.get("skill_name")
    if skill_name is not None and not (isinstance(skill_name, str) and is_valid_name(skill_name)):
        raise InvalidCall("HOST: skill_name must be a skill's name, such as 'disk-report'.")
    now = utcnow()
    with context.sessions() as session, session.begin():
        for external_id in dict.fromkeys(chat_ids):
            chat = _chat(session, context.owner_id, external_id)
            key = (ChatReview.owner_id == context.owner_id) & (ChatReview.chat_id == chat.id)
            review = session.scalar(select(ChatReview).where(key))
            if review is None:
                review = ChatReview(owner_id=context.owner_id, chat_id=chat.id)
                session.add(review)
            review.skill_name = skill_name
            review.reviewed_at = now
        session.flush()
        total = _drop_oldest(session, context.owner_id)
    return {"reviewed": list(dict.fromkeys(chat_ids)), "skill_name": skill_name, "records": total}


def _drop_oldest(session: Session, owner_id: int) -> int:
    """Keep the newest MAX_REVIEWED_CHATS records; returns how many the owner holds."""
    newest = (
        select(ChatReview.id)
        .where(ChatReview.owner_id == owner_id)
        .order_by(ChatReview.reviewed_at.desc(), ChatReview.id.desc())
    )
    dropped = list(session.scalars(newest.offset(MAX_REVIEWED_CHATS)))
    if dropped:
        session.execute(delete(ChatReview).where(ChatReview.id.in_(dropped)))
    count = select(func.count()).select_from(ChatReview).where(ChatReview.owner_id == owner_id)
    return session.scalar(count) or 0


def _chat(session: Session, owner_id: int, external_id: str) -> Chat:
    chat = session.scalar(
        select(Chat).where(Chat.owner_id == owner_id, Chat.external_id == external_id)
    )
    if chat is None:
        raise ChatNotFound(f"HOST: there is no chat {external_id[:200]!r}; call list_chats.")
    return chat


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


CHAT_ID = {"type": "string", "description": "A chat id, as list_chats gives it."}

TOOLS = (
    Tool(
        "list_chats",
        Tier.READ,
        "Lists the owner's chats, newest first, with their counts of declined, expired, failed "
        "and timed-out calls. Chats with issues are where a new or better skill could help.",
        _object(
            {
                "only_unreviewed": {
                    "type": "boolean",
                    "description": "Leave out chats already marked reviewed.",
                }
            },
            [],
        ),
        list_chats,
    ),
    Tool(
        "read_chat_transcript",
        Tier.READ,
        "Reads one chat's tool calls in order: tool, arguments, status, error and result.",
        _object({"chat_id": CHAT_ID}, ["chat_id"]),
        read_chat_transcript,
    ),
    Tool(
        "mark_chats_reviewed",
        Tier.DRAFT,
        "Records chats as reviewed, optionally naming the skill drafted from them, so the next "
        "review skips them.",
        _object(
            {
                "chat_ids": {"type": "array", "items": CHAT_ID},
                "skill_name": {"type": "string", "description": "The skill drafted from them."},
            },
            ["chat_ids"],
        ),
        mark_chats_reviewed,
    ),
)

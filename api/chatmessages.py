"""A chat's history as the AI SDK's UI messages, and a client's messages read against it.

Each turn of a chat is two messages: the user's (the id the client gave it, or `prompt-<turn
id>` for a turn started by POST /api/turns) and the assistant's answer (the turn's id). A turn
a regenerate replaced is not in the history. The server's history is the one the model gets;
a client whose messages differ from it is told so (`data-history`), never believed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, or_, select, update
from sqlalchemy.orm import Session

from relay.errors import MessageNotFound, NoPrompt
from store.limits import MAX_CHAT_SHOWN_TURNS, MAX_PROMPT_CHARS
from store.models import Turn

PROMPT_PREFIX = "prompt-"
DIFFERS = (
    "The messages sent differ from this chat's history on the server; the server's history "
    "was used (GET /api/chats/{chat} shows it)."
)


def user_id(turn: Turn) -> str:
    return turn.prompt_id or f"{PROMPT_PREFIX}{turn.id}"


def kept_turns(
    session: Session, owner_id: int, chat_id: str, limit: int = MAX_CHAT_SHOWN_TURNS
) -> list[Turn]:
    """The chat's latest turns that no regenerate replaced, oldest first."""
    rows = session.scalars(
        select(Turn)
        .where(Turn.owner_id == owner_id, Turn.chat_id == chat_id, Turn.replaced_by.is_(None))
        .order_by(Turn.created_at.desc(), Turn.id.desc())
        .limit(limit)
    ).all()
    return list(reversed(rows))


def as_messages(turns: list[Turn]) -> list[dict[str, Any]]:
    """The turns as UI messages: the prompt, then the answer with its state in `metadata`."""
    messages: list[dict[str, Any]] = []
    for turn in turns:
        prompt = {"type": "text", "text": turn.prompt}
        messages.append({"id": user_id(turn), "role": "user", "parts": [prompt]})
        meta: dict[str, Any] = {"turnId": turn.id, "status": turn.status}
        if turn.usage:
            meta["usage"] = turn.usage
        if turn.error_code:
            meta["error"] = {"code": turn.error_code, "message": turn.error_message or ""}
        parts = [{"type": "text", "text": turn.text}] if turn.text else []
        messages.append({"id": turn.id, "role": "assistant", "parts": parts, "metadata": meta})
    return messages


def prompt_of(message: dict[str, Any]) -> str:
    """The text of the client's new user message: its text parts, joined."""
    if message.get("role") != "user":
        raise NoPrompt("The last message must be the user's: the prompt to answer.")
    texts = []
    for part in message["parts"]:
        if part.get("type") == "text":
            texts.append(str(part.get("text") or ""))
        elif part.get("type") != "step-start":
            raise NoPrompt(
                f"A prompt takes text parts only, not '{part.get('type')}'; "
                "send files with POST /api/files."
            )
    prompt = "".join(texts)
    if not prompt.strip():
        raise NoPrompt("The last message has no text to answer.")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise NoPrompt(f"The prompt has {len(prompt)} characters; at most {MAX_PROMPT_CHARS}.")
    return prompt


def differs(sent: list[dict[str, Any]], held: list[dict[str, Any]], whole: bool) -> bool:
    """Whether the client's messages `sent` are not the server's `held` ones: the same ids
    and roles in order, and the same user text. When the server showed only its latest turns
    (`whole` False), only the client's last as many messages are compared."""
    if not whole and len(sent) > len(held):
        sent = sent[len(sent) - len(held) :]
    if len(sent) != len(held):
        return True
    for mine, theirs in zip(sent, held, strict=True):
        if mine.get("id") != theirs["id"] or mine.get("role") != theirs["role"]:
            return True
        if theirs["role"] == "user" and _text(mine) != theirs["parts"][0]["text"]:
            return True
    return False


def _text(message: dict[str, Any]) -> str:
    return "".join(
        str(part.get("text") or "") for part in message["parts"] if part.get("type") == "text"
    )


# The chat's latest kept turns, as every answer's request compares them: built once.
_KEPT = select(Turn.id, Turn.prompt_id, Turn.prompt).where(
    Turn.owner_id == bindparam("owner_id"),
    Turn.chat_id == bindparam("chat_id"),
    Turn.replaced_by.is_(None),
)
_LATEST = (Turn.created_at.desc(), Turn.id.desc())
_OUTLINE = _KEPT.order_by(*_LATEST).limit(MAX_CHAT_SHOWN_TURNS)
_OUTLINE_BEFORE = (
    _KEPT.where(Turn.created_at < bindparam("before"))
    .order_by(*_LATEST)
    .limit(MAX_CHAT_SHOWN_TURNS)
)


def outline(
    session: Session, owner_id: int, chat_id: str, before: datetime | None = None
) -> list[dict[str, Any]]:
    """The chat's latest kept turns (those created `before`, when given) as the messages a
    client's are compared with: ids, roles and the user's text, without reading the answers."""
    parameters: dict[str, Any] = {"owner_id": owner_id, "chat_id": chat_id}
    query = _OUTLINE
    if before is not None:
        query, parameters["before"] = _OUTLINE_BEFORE, before
    rows = session.connection().execute(query, parameters).all()
    messages: list[dict[str, Any]] = []
    for turn_id, prompt_id, prompt in reversed(rows):
        prompt_part = {"type": "text", "text": prompt}
        shown_id = prompt_id or f"{PROMPT_PREFIX}{turn_id}"
        messages.append({"id": shown_id, "role": "user", "parts": [prompt_part]})
        messages.append({"id": turn_id, "role": "assistant", "parts": []})
    return messages


def replace_from(session: Session, target: Turn, by: str) -> None:
    """Mark `target` and the chat's later kept turns replaced by the turn `by`."""
    session.execute(
        update(Turn)
        .where(
            Turn.owner_id == target.owner_id,
            Turn.chat_id == target.chat_id,
            Turn.replaced_by.is_(None),
            Turn.created_at >= target.created_at,
            Turn.id != by,
        )
        .values(replaced_by=by)
        .execution_options(synchronize_session=False)
    )


def regenerated(session: Session, owner_id: int, chat_id: str, message_id: str | None) -> Turn:
    """The turn answering `message_id` (a user's message or the answer itself; the last turn
    when None): it and the chat's later turns are the ones a regenerate replaces."""
    kept = select(Turn).where(
        Turn.owner_id == owner_id, Turn.chat_id == chat_id, Turn.replaced_by.is_(None)
    )
    if message_id is None:
        target = session.scalars(kept.order_by(Turn.created_at.desc(), Turn.id.desc())).first()
    else:
        named = [Turn.id == message_id, Turn.prompt_id == message_id]
        if message_id.startswith(PROMPT_PREFIX):
            named.append(Turn.id == message_id.removeprefix(PROMPT_PREFIX))
        target = session.scalars(kept.where(or_(*named))).first()
    if target is None:
        shown = "answer" if message_id is None else f"message '{message_id}'"
        raise MessageNotFound(f"The chat '{chat_id}' has no {shown} to regenerate.")
    return target

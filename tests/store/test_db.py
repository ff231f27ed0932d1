"""The rows every call and run writes: inserted at once, with their defaults, in the session."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from store.db import insert_now, make_engine, make_sessions, transaction
from store.models import Owner, ToolCall


def test_an_inserted_row_gets_its_defaults_keeps_null_as_null_and_saves_later_changes(
    database_url: str,
) -> None:
    sessions = make_sessions(make_engine(database_url))
    with transaction(sessions) as session:
        owner = Owner(name=f"o-{uuid.uuid4().hex[:8]}")
        session.add(owner)
    call = ToolCall(id=str(uuid.uuid4()), owner_id=owner.id, tool="list_skills", tier="read",
                    status="done", result=None)  # fmt: skip

    with transaction(sessions) as session:
        insert_now(session, call)
        call.approval_id = "later-change"  # after the INSERT, in the same transaction

    # The defaults are on the row as well as in the table; the session is closed, so reading
    # them must not need it.
    assert call.mode == "execute" and call.created_at is not None
    with sessions() as session:
        stored = session.get(ToolCall, call.id)
        result_is_null = session.scalar(
            select(ToolCall.id).where(ToolCall.id == call.id, ToolCall.result.is_(None))
        )
    assert stored is not None
    assert stored.mode == "execute"
    assert stored.approval_id == "later-change"
    assert result_is_null == call.id  # SQL NULL, not the JSON text 'null'

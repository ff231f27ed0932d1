"""The rows every call and run writes: inserted at once, with their defaults, in a session or on
a bare connection; rows read without a session."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from sqlalchemy import inspect, select

from store.db import (
    SessionFactory,
    core_connection,
    core_transaction,
    detached,
    insert_now,
    insert_row,
    make_engine,
    make_sessions,
    transaction,
)
from store.models import Owner, ToolCall


def new_call(sessions: SessionFactory, status: str) -> ToolCall:
    """A call (not saved yet) of a new owner's."""
    with transaction(sessions) as session:
        owner = Owner(name=f"o-{uuid.uuid4().hex[:8]}")
        session.add(owner)
    return ToolCall(id=str(uuid.uuid4()), owner_id=owner.id, tool="list_skills", tier="read",
                    status=status, result=None)  # fmt: skip


def test_an_inserted_row_gets_its_defaults_keeps_null_as_null_and_saves_later_changes(
    database_url: str,
) -> None:
    sessions = make_sessions(make_engine(database_url))
    call = new_call(sessions, "done")

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


def test_a_row_inserted_on_a_bare_connection_gets_its_defaults_and_reads_back(
    database_url: str,
) -> None:
    sessions = make_sessions(make_engine(database_url))
    call = new_call(sessions, "running")
    with core_transaction(sessions) as connection:
        insert_row(connection, call)
    assert call.mode == "execute" and call.created_at is not None
    assert inspect(call).detached
    with core_connection(sessions) as connection:
        row = connection.execute(select(*ToolCall.__table__.c).where(ToolCall.id == call.id)).one()
    again = detached(ToolCall, row._asdict())
    assert inspect(again).detached and inspect(again).identity == (call.id,)
    assert (again.mode, again.status, again.created_at) == ("execute", "running", call.created_at)


def test_a_detached_row_can_be_built_first_thing_in_a_process():
    # Building one configures the mappers when nothing else in the process used the ORM yet
    # (a worker's first claim).
    code = (
        "from store.db import detached\n"
        "from store.models import Run\n"
        "run = detached(Run, {'id': 'r', 'status': 'running'})\n"
        "assert run.status == 'running'\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr

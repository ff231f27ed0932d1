"""The rows every call and run writes: inserted at once, with their defaults, in a session or on
a bare connection; rows read without a session."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy.exc
from sqlalchemy import bindparam, inspect, make_url, select, update

from store.db import (
    CoreStatement,
    SessionFactory,
    core_connection,
    core_transaction,
    detached,
    insert_now,
    insert_row,
    make_engine,
    make_sessions,
    transaction,
    transient,
)
from store.models import Owner, ToolCall, utcnow

pytestmark = pytest.mark.both_databases  # SQL compiled for each dialect


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


_CALLS = ToolCall.__table__
_ANSWER = (
    update(_CALLS)
    .where(_CALLS.c.id == bindparam("call_id"), _CALLS.c.status == "running")
    .values(
        status="done",
        result=bindparam("new_result", type_=_CALLS.c.result.type),
        finished_at=bindparam("new_finished_at", type_=_CALLS.c.finished_at.type),
    )
    .returning(*_CALLS.c)
)


def test_a_statement_returns_its_rows_as_dicts_and_joins_the_blocks_transaction(
    database_url: str,
) -> None:
    sessions = make_sessions(make_engine(database_url))
    call, other = new_call(sessions, "running"), new_call(sessions, "running")
    with core_transaction(sessions) as connection:
        insert_row(connection, call)
        insert_row(connection, other)
    result = {"text": "héllo", "items": [1, 2.5, None, True], "nested": {"a": []}}
    finished = utcnow()
    parameters = {"call_id": call.id, "new_result": result, "new_finished_at": finished}
    statement = CoreStatement(_ANSWER)

    with pytest.raises(RuntimeError), core_transaction(sessions) as connection:
        assert len(statement.execute(connection, parameters)) == 1
        raise RuntimeError("the block fails: the update is rolled back with it")
    with core_transaction(sessions) as connection:
        rows = statement.execute(connection, parameters)
        assert statement.execute(connection, parameters) == []  # no longer running
    # The same values, typed the same, as SQLAlchemy's own execution reads back.
    with core_connection(sessions) as connection:
        stored = connection.execute(select(*_CALLS.c).where(_CALLS.c.id == call.id)).one()
    assert rows == [stored._asdict()]
    assert rows[0]["result"] == result and rows[0]["finished_at"] == finished
    assert (rows[0]["status"], rows[0]["created_at"]) == ("done", call.created_at)
    with core_connection(sessions) as connection:
        untouched = connection.execute(select(_CALLS.c.status).where(_CALLS.c.id == other.id))
        assert untouched.scalar_one() == "running"


def test_a_refused_insert_rolls_back_and_the_pool_still_serves(database_url: str) -> None:
    sessions = make_sessions(make_engine(database_url))
    call = new_call(sessions, "running")
    call.chat_id = 999_999  # no such chat: the foreign key refuses it, as when it was just deleted
    with pytest.raises(sqlalchemy.exc.IntegrityError), core_transaction(sessions) as connection:
        insert_row(connection, call)
    with core_transaction(sessions) as connection:  # the pool's connection still serves
        call.chat_id = None
        insert_row(connection, call)


def test_a_database_that_cant_be_reached_raises_what_sqlalchemy_raises(
    database_url: str, tmp_path: Path
) -> None:
    # The broker answers 503 to SQLAlchemy's errors; the driver's own would be a 500.
    if database_url.startswith("sqlite"):
        unreachable = f"sqlite:///{tmp_path}/no-such-folder/skillfleet.db"
    else:
        unreachable = make_url(database_url).set(port=1).render_as_string(hide_password=False)
    sessions = make_sessions(make_engine(unreachable))
    with pytest.raises(sqlalchemy.exc.OperationalError), core_transaction(sessions):
        pytest.fail("a transaction began without a database")


def test_a_transient_row_saves_as_its_constructor_would_make_it(database_url: str) -> None:
    sessions = make_sessions(make_engine(database_url))
    owner_id = new_call(sessions, "done").owner_id
    values = {"id": str(uuid.uuid4()), "owner_id": owner_id, "tool": "list_skills",
              "tier": "read", "status": "running", "arguments": {"a": [1]}}  # fmt: skip
    made, constructed = transient(ToolCall, values), ToolCall(**values)
    assert inspect(made).transient and made.mode is None is constructed.mode
    made.status = "done"  # changed later, before it is saved
    with core_transaction(sessions) as connection:
        insert_row(connection, made)
    with sessions() as session:
        stored = session.get(ToolCall, values["id"])
    assert stored is not None
    assert (stored.status, stored.arguments, stored.mode) == ("done", {"a": [1]}, "execute")
    assert stored.created_at == made.created_at

    with pytest.raises(TypeError, match="stauts is not a column of ToolCall"):
        transient(ToolCall, {**values, "stauts": "done"})

"""A tool call's state: the one writer of `tool_calls.status` and the chat's issue counters.

    deciding -> done | denied | failed                     (answered when it is made)
    deciding -> pending_approval -> (running ->) done | failed | denied | expired
    deciding -> running -> done | failed

Every write goes through `record` (a new call) or `answer` (a call that was open); `answer` is
one conditional UPDATE, so of two writers racing to end a call exactly one wins.
"""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Any, cast

from sqlalchemy import Table, bindparam, or_, update
from sqlalchemy.orm import Session

from relay import feed
from store.db import DriverConnection, DriverStatement, insert_row, save
from store.models import Chat, ToolCall, utcnow


class CallStatus(StrEnum):
    DECIDING = "deciding"
    PENDING_APPROVAL = "pending_approval"
    RUNNING = "running"
    DONE = "done"
    DENIED = "denied"
    FAILED = "failed"
    EXPIRED = "expired"


# States that can still change; everything else is an end state.
OPEN_STATES = (CallStatus.PENDING_APPROVAL, CallStatus.RUNNING)
END_STATES = (CallStatus.DONE, CallStatus.DENIED, CallStatus.FAILED, CallStatus.EXPIRED)
# The chat counter an ending adds to, which chat review reads ("needs review").
_COUNTERS = {
    CallStatus.DENIED: Chat.declined_calls,
    CallStatus.EXPIRED: Chat.expired_calls,
    CallStatus.FAILED: Chat.failed_calls,
}
TIMED_OUT = "timed_out"
_CALLS = cast(Table, ToolCall.__table__)
_CHATS = cast(Table, Chat.__table__)


def record(
    session: Session | DriverConnection,
    call: ToolCall,
    status: CallStatus,
    events: list[feed.OwnerEvent] | None = None,
) -> None:
    """Save a new call in `status` (its end, or pending_approval / running).

    On a driver's connection the call must be new, and its event goes to `events` (see
    `answer`).
    """
    call.status = status
    if status in END_STATES:
        call.finished_at = utcnow()
    if isinstance(session, Session):
        save(session, call)
    else:
        insert_row(session, call)
    _count(session, call.chat_id, status, call.error_code)
    _announce(session, call.owner_id, call.id, status, call.error_code, events)


def answer(
    session: Session | DriverConnection,
    call_id: str,
    status: CallStatus,
    *,
    result: Any = None,
    error: tuple[str, str] | None = None,
    run_id: str | None = None,
    events: list[feed.OwnerEvent] | None = None,
) -> bool:
    """End (or start running) an open call; False when it was no longer open.

    The owner's event goes to `events` when given (the caller publishes it after the commit; a
    driver's connection needs it), else it is noted on the session.
    """
    values: dict[str, Any] = {"status": status}
    if status in END_STATES:
        values["finished_at"] = utcnow()
    if result is not None:
        values["result"] = result
    if error is not None:
        values["error_code"], values["error_message"] = error
    if run_id is not None:
        values["run_id"] = run_id
    statement = _answer_statement(frozenset(values))
    parameters = {"call_id": call_id, **{f"new_{key}": value for key, value in values.items()}}
    if isinstance(session, Session):
        row = session.execute(statement.statement, parameters).first()
        answered = None if row is None else row._asdict()
    else:  # a worker's finish: on the driver's cursor
        rows = statement.execute(session, parameters)
        answered = rows[0] if rows else None
    if answered is None:
        return False
    code = error[0] if error else None
    _count(session, answered["chat_id"], status, code)
    _announce(session, answered["owner_id"], call_id, status, code, events)
    return True


@functools.lru_cache(maxsize=32)
def _answer_statement(keys: frozenset[str]) -> DriverStatement:
    """The UPDATE that ends an open call, setting `keys`: built once per set of keys, on the
    table rather than the ORM, so a call costs only its execution.

    The open states are compared one by one: SQLAlchemy renders an IN list's SQL again at
    every execution (about 0.1 ms of a worker's finish here).
    """
    calls = _CALLS.c
    source = or_(*(calls.status == str(state) for state in (CallStatus.DECIDING, *OPEN_STATES)))
    return DriverStatement(
        update(_CALLS)
        .where(calls.id == bindparam("call_id"), source)
        .values({key: bindparam(f"new_{key}", type_=calls[key].type) for key in sorted(keys)})
        .returning(calls.chat_id, calls.id, calls.owner_id)
    )


def _count(
    session: Session | DriverConnection, chat_id: int | None, status: CallStatus, code: str | None
) -> None:
    if chat_id is None:
        return
    column = Chat.timed_out_calls if code == TIMED_OUT else _COUNTERS.get(status)
    if column is None:
        return
    if isinstance(session, Session):
        session.execute(update(Chat).where(Chat.id == chat_id).values({column: column + 1}))
    else:
        _counter_statement(column.key).execute(session, {"chat_id": chat_id})


@functools.cache
def _counter_statement(key: str) -> DriverStatement:
    """The UPDATE that adds one to a chat's counter `key`, on a driver's connection."""
    counter = _CHATS.c[key]
    return DriverStatement(
        update(_CHATS).where(_CHATS.c.id == bindparam("chat_id")).values({counter: counter + 1})
    )


def _announce(
    session: Session | DriverConnection,
    owner_id: int,
    call_id: str,
    status: CallStatus,
    code: str | None,
    events: list[feed.OwnerEvent] | None,
) -> None:
    """An ended call goes to the owner's event feed: into `events`, or noted on the session."""
    if status not in END_STATES:
        return
    data = {"call_id": call_id, "status": str(status), "error_code": code}
    if events is not None:
        events.append((owner_id, "call.finished", data))
    else:
        assert isinstance(session, Session), "a driver connection's caller publishes its events"
        feed.note(session, owner_id, "call.finished", data)

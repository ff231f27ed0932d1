"""A tool call's state: the one writer of `tool_calls.status` and the chat's issue counters.

    deciding -> done | denied | failed                     (answered when it is made)
    deciding -> pending_approval -> (running ->) done | failed | denied | expired
    deciding -> (pending_approval ->) pending_question -> done | failed | expired
    deciding -> running -> done | failed

A call is made `deciding` in memory (`new`), then saved in what it became (`record`) or, once
open, ended by `answer`: one conditional UPDATE, so of two writers racing to end a call exactly
one wins.
"""

from __future__ import annotations

import functools
from typing import Any, cast

from sqlalchemy import Table, bindparam, or_, update
from sqlalchemy.orm import Session

from store import ownerevents
from store.db import CoreConnection, CoreStatement, insert_row, save, transient
from store.models import Chat, ToolCall, utcnow
from store.ownerevents import OwnerEvent
from store.states import CALLS, CallStatus

# States that can still change; everything else is an end state.
OPEN_STATES = (CallStatus.PENDING_APPROVAL, CallStatus.PENDING_QUESTION, CallStatus.RUNNING)
END_STATES = CALLS.ends
# The chat counter an ending adds to, which chat review reads ("needs review").
_COUNTERS = {
    CallStatus.DENIED: Chat.declined_calls,
    CallStatus.EXPIRED: Chat.expired_calls,
    CallStatus.FAILED: Chat.failed_calls,
}
TIMED_OUT = "timed_out"
_CALLS = cast(Table, ToolCall.__table__)
_CHATS = cast(Table, Chat.__table__)


def new(values: dict[str, Any]) -> ToolCall:
    """A call being decided, not saved yet."""
    return transient(ToolCall, {**values, "status": CALLS.created(CallStatus.DECIDING)})


def record(
    session: Session | CoreConnection,
    call: ToolCall,
    status: CallStatus,
    events: list[OwnerEvent] | None = None,
) -> None:
    """Save a new call in `status` (its end, or pending_approval / running).

    On a driver's connection the call must be new, and its event goes to `events` (see
    `answer`).
    """
    call.status = CALLS.check(CallStatus.DECIDING, status)
    if status in END_STATES:
        call.finished_at = utcnow()
    if isinstance(session, Session):
        save(session, call)
    else:
        insert_row(session, call)
    _count(session, call.chat_id, status, call.error_code)
    _announce(session, call.owner_id, call.id, status, call.error_code, events)


def answer(
    session: Session | CoreConnection,
    call_id: str,
    status: CallStatus,
    *,
    result: Any = None,
    error: tuple[str, str] | None = None,
    run_id: str | None = None,
    events: list[OwnerEvent] | None = None,
    call: ToolCall | None = None,
) -> bool:
    """End (or start running) an open call; False when it was no longer in a state that may
    move to `status`.

    The owner's event goes to `events` when given (the caller publishes it after the commit; a
    driver's connection needs it), else it is noted on the session. `call`, the caller's copy
    of the row, is given the new status (and error) too.
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
    statement = _answer_statement(status, frozenset(values))
    parameters = {"call_id": call_id, **{f"new_{key}": value for key, value in values.items()}}
    if isinstance(session, Session):
        row = session.execute(statement.statement, parameters).first()
        answered = None if row is None else row._asdict()
    else:  # a worker's finish: on the driver's cursor
        rows = statement.execute(session, parameters)
        answered = rows[0] if rows else None
    if call is not None:
        call.status = status
        if error is not None:
            call.error_code, call.error_message = error
    if answered is None:
        return False
    code = error[0] if error else None
    _count(session, answered["chat_id"], status, code)
    _announce(session, answered["owner_id"], call_id, status, code, events)
    return True


@functools.lru_cache(maxsize=32)
def _answer_statement(status: CallStatus, keys: frozenset[str]) -> CoreStatement:
    """The UPDATE that moves an open call to `status`, setting `keys`: built once per status
    and set of keys, on the table rather than the ORM, so a call costs only its execution.

    The source states are compared one by one: SQLAlchemy renders an IN list's SQL again at
    every execution (about 0.1 ms of a worker's finish here).
    """
    calls = _CALLS.c
    source = or_(*(calls.status == str(state) for state in CALLS.sources(status)))
    return CoreStatement(
        update(_CALLS)
        .where(calls.id == bindparam("call_id"), source)
        .values({key: bindparam(f"new_{key}", type_=calls[key].type) for key in sorted(keys)})
        .returning(calls.chat_id, calls.id, calls.owner_id)
    )


def _count(
    session: Session | CoreConnection, chat_id: int | None, status: CallStatus, code: str | None
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
def _counter_statement(key: str) -> CoreStatement:
    """The UPDATE that adds one to a chat's counter `key`, on a driver's connection."""
    counter = _CHATS.c[key]
    return CoreStatement(
        update(_CHATS).where(_CHATS.c.id == bindparam("chat_id")).values({counter: counter + 1})
    )


def _announce(
    session: Session | CoreConnection,
    owner_id: int,
    call_id: str,
    status: CallStatus,
    code: str | None,
    events: list[OwnerEvent] | None,
) -> None:
    """An ended call goes to the owner's event feed: into `events`, or noted on the session."""
    if status not in END_STATES:
        return
    data = {"call_id": call_id, "status": str(status), "error_code": code}
    if events is not None:
        events.append((owner_id, "call.finished", data))
    else:
        assert isinstance(session, Session), "a driver connection's caller publishes its events"
        ownerevents.note(session, owner_id, "call.finished", data)

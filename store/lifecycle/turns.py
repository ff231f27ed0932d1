"""An agent turn's state: the one writer of `turns.status`.

    queued -> running -> succeeded | failed | stopped | timed_out | interrupted
    queued -> stopped | failed              (stopped before a worker took it, or never sent)

Every move is one conditional UPDATE, so a redelivered task or a racing stop changes nothing
twice.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from sqlalchemy import Table, Update, bindparam, select, update
from sqlalchemy.orm import Session

from store.db import CoreConnection, detached, insert_row
from store.lifecycle.claims import claim_row, claim_statement
from store.limits import MAX_CHAT_HISTORY_TURNS, MAX_TURN_TEXT_CHARS
from store.models import Turn, utcnow
from store.states import TURNS, TurnStatus

OPEN_STATES = TURNS.open

# The control worker's claim, the first write of every turn before its model is asked.
_CLAIM = claim_statement(cast(Table, Turn.__table__), TURNS, TurnStatus.QUEUED, TurnStatus.RUNNING)


# Statements a chat's every answer runs, built once.
_OPEN = select(Turn.id).where(
    Turn.owner_id == bindparam("owner_id"),
    Turn.chat_id == bindparam("chat_id"),
    Turn.status.in_(OPEN_STATES),
)
_HISTORY = (
    select(Turn.prompt, Turn.text)
    .where(
        Turn.owner_id == bindparam("owner_id"),
        Turn.chat_id == bindparam("chat_id"),
        Turn.status == TurnStatus.SUCCEEDED,
        Turn.replaced_by.is_(None),
        Turn.created_at < bindparam("before"),
    )
    .order_by(Turn.created_at.desc())
    .limit(MAX_CHAT_HISTORY_TURNS)
)


def open_turn(connection: CoreConnection, owner_id: int, chat_id: str) -> str | None:
    """The id of the chat's turn that has not ended, if any (a chat holds one at a time)."""
    found = connection.execute(_OPEN, {"owner_id": owner_id, "chat_id": chat_id}).first()
    return None if found is None else str(found.id)


def create(
    session: Session,
    owner_id: int,
    prompt: str,
    chat_id: str | None = None,
    job_run_id: str | None = None,
    mode: str = "execute",
    prompt_id: str | None = None,
) -> Turn:
    """A queued turn, written (the caller checked the chat has no open one); the row returned
    is detached."""
    turn = Turn(
        id=str(uuid.uuid4()),
        prompt_id=prompt_id,
        owner_id=owner_id,
        chat_id=chat_id,
        job_run_id=job_run_id,
        mode=mode,
        prompt=prompt,
        status=TURNS.created(TurnStatus.QUEUED),
        calls=0,
        created_at=utcnow(),
    )
    session.flush()  # what the session holds is written first: the turn may name it
    insert_row(session.connection(), turn)  # one INSERT, none of the unit of work's bookkeeping
    return turn


def claim(connection: CoreConnection | Session, turn_id: str, worker: str) -> Turn | None:
    """queued -> running for this worker (the row, detached); None when it was taken or ended
    before."""
    rows = claim_row(_CLAIM, connection, turn_id, worker)
    return detached(Turn, rows[0]) if rows else None


def finish(
    session: Session,
    turn_id: str,
    status: TurnStatus,
    text: str,
    calls: int,
    error: tuple[str, str] | None = None,
    usage: dict[str, int] | None = None,
) -> bool:
    """running -> an end state; False when the turn already ended."""
    values: dict[str, Any] = {
        "text": text[-MAX_TURN_TEXT_CHARS:],
        "calls": calls,
        "finished_at": utcnow(),
        "usage": usage or None,
    }
    if error is not None:
        values["error_code"], values["error_message"] = error
    return _moved(session, _move(turn_id, status, TurnStatus.RUNNING).values(**values))


def stop_queued(session: Session, turn_id: str) -> bool:
    """queued -> stopped, for a turn no worker took yet."""
    statement = _move(turn_id, TurnStatus.STOPPED, TurnStatus.QUEUED).values(
        finished_at=utcnow(), error_code="stopped", error_message="Stopped before it started."
    )
    return _moved(session, statement)


def abandon(session: Session, turn_id: str, code: str, message: str) -> None:
    """queued -> failed, for a turn that could not be sent to the control worker."""
    statement = _move(turn_id, TurnStatus.FAILED, TurnStatus.QUEUED).values(
        finished_at=utcnow(), error_code=code, error_message=message
    )
    _moved(session, statement)


def history(connection: CoreConnection, turn: Turn) -> list[tuple[str, str]]:
    """The prompts and answers of the chat's earlier finished turns, oldest first."""
    if turn.chat_id is None:
        return []
    parameters = {"owner_id": turn.owner_id, "chat_id": turn.chat_id, "before": turn.created_at}
    rows = connection.execute(_HISTORY, parameters).all()
    return [(prompt, text or "") for prompt, text in reversed(rows)]


def _move(turn_id: str, status: TurnStatus, source: TurnStatus = TurnStatus.QUEUED) -> Update:
    """The UPDATE moving the turn from `source` to `status` (a move the table lists)."""
    TURNS.check(source, status)
    return update(Turn).where(Turn.id == turn_id, Turn.status == source).values(status=status)


def _moved(session: Session, statement: Update) -> bool:
    result = session.execute(statement.execution_options(synchronize_session=False))
    return int(result.rowcount) == 1  # type: ignore[attr-defined]

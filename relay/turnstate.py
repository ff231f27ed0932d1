"""An agent turn's state: the one writer of `turns.status`.

    queued -> running -> succeeded | failed | stopped | timed_out | interrupted
    queued -> stopped                       (stopped before a worker took it)

Every move is one conditional UPDATE, so a redelivered task or a racing stop changes nothing
twice.
"""

from __future__ import annotations

import uuid
from enum import StrEnum
from typing import Any

import redis
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from relay import heartbeat
from relay.errors import TurnActive, TurnNotFound
from store.db import SessionFactory, transaction
from store.limits import MAX_CHAT_HISTORY_TURNS, MAX_TURN_TEXT_CHARS
from store.models import Turn, utcnow


class TurnStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    TIMED_OUT = "timed_out"
    INTERRUPTED = "interrupted"


OPEN_STATES = (TurnStatus.QUEUED, TurnStatus.RUNNING)
LOST_WORKER = "The control worker running this turn stopped; the turn will not run again."


def create(
    session: Session,
    owner_id: int,
    prompt: str,
    chat_id: str | None = None,
    job_run_id: str | None = None,
    mode: str = "execute",
) -> Turn:
    """A queued turn; a chat holds one open turn at a time."""
    if chat_id is not None:
        active = session.scalar(
            select(Turn.id).where(
                Turn.owner_id == owner_id, Turn.chat_id == chat_id, Turn.status.in_(OPEN_STATES)
            )
        )
        if active is not None:
            raise TurnActive(f"The chat already has a turn that has not ended ({active}).")
    turn = Turn(
        id=str(uuid.uuid4()),
        owner_id=owner_id,
        chat_id=chat_id,
        job_run_id=job_run_id,
        mode=mode,
        prompt=prompt,
        status=TurnStatus.QUEUED,
        calls=0,
        created_at=utcnow(),
    )
    session.add(turn)
    return turn


def claim(session: Session, turn_id: str, worker: str) -> Turn | None:
    """queued -> running for this worker; None when it was taken or ended before."""
    return session.scalars(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == TurnStatus.QUEUED)
        .values(status=TurnStatus.RUNNING, worker=worker, started_at=utcnow())
        .returning(Turn)
        .execution_options(synchronize_session=False)
    ).one_or_none()


def finish(
    session: Session,
    turn_id: str,
    status: TurnStatus,
    text: str,
    calls: int,
    error: tuple[str, str] | None = None,
) -> bool:
    """running -> an end state; False when the turn already ended."""
    values: dict[str, Any] = {
        "status": status,
        "text": text[-MAX_TURN_TEXT_CHARS:],
        "calls": calls,
        "finished_at": utcnow(),
    }
    if error is not None:
        values["error_code"], values["error_message"] = error
    result = session.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == TurnStatus.RUNNING)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def stop_queued(session: Session, turn_id: str) -> bool:
    """queued -> stopped, for a turn no worker took yet."""
    result = session.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == TurnStatus.QUEUED)
        .values(
            status=TurnStatus.STOPPED,
            finished_at=utcnow(),
            error_code="stopped",
            error_message="Stopped before it started.",
        )
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount) == 1  # type: ignore[attr-defined]


def abandon(session: Session, turn_id: str, code: str, message: str) -> None:
    """queued -> failed, for a turn that could not be sent to the control worker."""
    session.execute(
        update(Turn)
        .where(Turn.id == turn_id, Turn.status == TurnStatus.QUEUED)
        .values(
            status=TurnStatus.FAILED, finished_at=utcnow(), error_code=code, error_message=message
        )
        .execution_options(synchronize_session=False)
    )


def get(sessions: SessionFactory, turn_id: str, owner_id: int | None = None) -> Turn:
    with sessions() as session:
        turn = session.get(Turn, turn_id)
    if turn is None or (owner_id is not None and turn.owner_id != owner_id):
        raise TurnNotFound(f"You have no turn '{turn_id}'.")
    return turn


def history(session: Session, turn: Turn) -> list[tuple[str, str]]:
    """The prompts and answers of the chat's earlier finished turns, oldest first."""
    if turn.chat_id is None:
        return []
    rows = session.execute(
        select(Turn.prompt, Turn.text)
        .where(
            Turn.owner_id == turn.owner_id,
            Turn.chat_id == turn.chat_id,
            Turn.status == TurnStatus.SUCCEEDED,
            Turn.created_at < turn.created_at,
        )
        .order_by(Turn.created_at.desc())
        .limit(MAX_CHAT_HISTORY_TURNS)
    ).all()
    return [(prompt, text or "") for prompt, text in reversed(rows)]


def lost(sessions: SessionFactory, client: redis.Redis) -> list[Turn]:
    """Running turns whose worker stopped beating, moved to `interrupted`."""
    with sessions() as session:
        running = list(
            session.execute(select(Turn.id, Turn.worker).where(Turn.status == TurnStatus.RUNNING))
        )
    reaped = []
    for turn_id, worker in running:
        if not worker or heartbeat.is_alive(client, worker):
            continue
        with transaction(sessions) as session:
            if finish(
                session, turn_id, TurnStatus.INTERRUPTED, "", 0, ("interrupted", LOST_WORKER)
            ):
                found = session.get(Turn, turn_id)
                assert found is not None
                reaped.append(found)
    return reaped

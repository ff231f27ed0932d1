"""Counting a turn's calls: each call is admitted with its number in one atomic step.

A call's turn is its `turn_id`. A call without one counts against its chat's turn for the
current clock hour (UTC), so leaving out `turn_id` does not lift the limit; a call with neither
a turn nor a chat is a turn of its own.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection, bindparam, delete, insert, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from store.db import SessionFactory, core_transaction
from store.models import TurnCount, utcnow

# Counts are kept this long after a turn's first call, then the expiry task drops them.
TURN_COUNT_LIFE = timedelta(days=1)


def turn_key(turn_id: str | None, chat_id: int | None, now: datetime | None = None) -> str | None:
    """The turn a call counts against, or None when it is a turn of its own."""
    if turn_id is not None:
        return f"turn:{turn_id}"
    if chat_id is not None:
        hour = (now or utcnow()).strftime("%Y-%m-%dT%H")
        return f"chat:{chat_id}:{hour}"
    return None


def admit(sessions: SessionFactory, owner_id: int, key: str | None) -> int:
    """Count this call into its turn and return its number (1 for the first call).

    The increment and the read are one UPDATE ... RETURNING, so however many calls race, each
    gets a different number and the 51st is the 51st.
    """
    if key is None:
        return 1
    for _attempt in range(3):
        with core_transaction(sessions) as connection:
            number = count_into(connection, owner_id, key)
            if number is not None:
                return number
        try:
            with core_transaction(sessions) as connection:
                connection.execute(
                    insert(TurnCount).values(
                        owner_id=owner_id, turn=key, calls=1, created_at=utcnow()
                    )
                )
            return 1
        except IntegrityError:
            continue  # another call of this turn created the row first: count into it
    raise RuntimeError("a turn's count could not be created")  # pragma: no cover


def count_into(connection: Connection, owner_id: int, key: str) -> int | None:
    """Count a call into the turn `key` and return its number; None when the turn has no count
    yet (`admit` makes it)."""
    row = connection.execute(_COUNT, {"owner": owner_id, "key": key}).first()
    return None if row is None else int(row[0])


# Built once: a statement built per call costs more CPU than its execution.
_COUNT = (
    update(TurnCount)
    .where(TurnCount.owner_id == bindparam("owner"), TurnCount.turn == bindparam("key"))
    .values(calls=TurnCount.calls + 1)
    .returning(TurnCount.calls)
)


def forget_old(session: Session, limit: int) -> int:
    """Drop up to `limit` counts of turns that began over a day ago (the oldest first)."""
    old = (
        select(TurnCount.owner_id, TurnCount.turn)
        .where(TurnCount.created_at < utcnow() - TURN_COUNT_LIFE)
        .order_by(TurnCount.created_at)
        .limit(limit)
    )
    key = tuple_(TurnCount.owner_id, TurnCount.turn)
    result = session.execute(delete(TurnCount).where(key.in_(old)))
    return int(result.rowcount)  # type: ignore[attr-defined]

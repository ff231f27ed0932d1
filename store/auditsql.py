"""The audit append's two statements (store/audit.py) as each database's own SQL, run on the
driver's connection: the one place in store/ that writes SQL by hand.

An append runs in the transaction of every call and run, and SQLAlchemy's execution of a
statement (its cached compilation looked up, parameters processed, a result set up) costs
several times what SQLite spends running it. So the two statements of every append are written
here once per database, with their values in what the driver and column take, the same that
SQLAlchemy's types would send: on SQLite the DATETIME text SQLAlchemy writes (UTC, six-digit
microseconds) and the JSON column's text by store/jsoncodec.py; on PostgreSQL an aware datetime
and the JSON text cast to `json`. Everything else of the audit (a chain's first head, reading,
trimming, the schema itself in store/models.py) goes through SQLAlchemy, which also reads back
what these write (tests/store/test_audit_chain.py).

A statement run here is not one SQLAlchemy sees: no engine event and no trace span is made for
it (it is part of the statement or commit around it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from store import jsoncodec
from store.db import CoreConnection

# The owner's head moved on by one, read back with the hash of the record before the new seq.
# On both databases RETURNING sees the row as updated, so `seq - 1` is the record before.
_ADVANCE = {
    "sqlite": (
        "UPDATE audit_heads SET seq = seq + 1 WHERE owner_id = ? RETURNING seq, "
        "(SELECT earlier.hash FROM audit_records AS earlier "
        "WHERE earlier.owner_id = audit_heads.owner_id AND earlier.seq = audit_heads.seq - 1)"
    ),
    "postgresql": (
        "UPDATE audit_heads SET seq = seq + 1 WHERE owner_id = %s RETURNING seq, "
        "(SELECT earlier.hash FROM audit_records AS earlier "
        "WHERE earlier.owner_id = audit_heads.owner_id AND earlier.seq = audit_heads.seq - 1)"
    ),
}
_COLUMNS = "owner_id, seq, created_at, kind, actor, subject, facts, prev_hash, hash"
_INSERT = {
    "sqlite": f"INSERT INTO audit_records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "postgresql": (
        f"INSERT INTO audit_records ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s::json, %s, %s)"
    ),
}
COLUMNS = tuple(_COLUMNS.split(", "))  # every column of AuditRecord, in its order


def driver(connection: Session | CoreConnection) -> tuple[str, Any]:
    """The database's name and the driver's connection of the caller's transaction. A Session's
    pending changes are flushed first, as its own execute would (they come before the head's
    lock)."""
    if isinstance(connection, Session):
        connection.flush()
        connection = connection.connection()
    return connection.dialect.name, connection.connection.dbapi_connection


def advance(dialect: str, dbapi: Any, owner_id: int) -> Sequence[Any] | None:
    """The owner's head moved on: (its new seq, the hash of the record before it), or None if
    the owner has no head yet."""
    return dbapi.execute(_ADVANCE[dialect], (owner_id,)).fetchone()  # type: ignore[no-any-return]


def insert(dialect: str, dbapi: Any, values: Sequence[Any]) -> None:
    """Insert one record, `values` in _COLUMNS' order with `created_at` a UTC datetime and
    `facts` a dict."""
    owner_id, seq, created_at, kind, actor, subject, facts, prev_hash, digest = values
    when: datetime | str = created_at
    if dialect == "sqlite":
        when = created_at.replace(tzinfo=None).isoformat(" ", "microseconds")
    row = (owner_id, seq, when, kind, actor, subject, jsoncodec.encode(facts), prev_hash, digest)
    dbapi.execute(_INSERT[dialect], row)

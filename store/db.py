"""Engines and sessions for SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.orm import Session, sessionmaker

SessionFactory = sessionmaker[Session]


def make_engine(url: str, **options: Any) -> Engine:
    """An engine with the settings each backend needs for concurrent API and worker processes."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True, **options)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_sessions(engine: Engine) -> SessionFactory:
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(sessions: SessionFactory) -> Iterator[Session]:
    """A session that commits when the block ends and rolls back on any error."""
    with sessions() as session, session.begin():
        yield session


def save(session: Session, row: object) -> None:
    """Insert a new row, or update one read in another session (merge costs a SELECT)."""
    if inspect(row).has_identity:
        session.merge(row)
    else:
        session.add(row)

"""Engines and sessions for SQLite and PostgreSQL."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Insert, Table, create_engine, event, insert, inspect
from sqlalchemy.orm import Mapper, Session, make_transient_to_detached, sessionmaker
from sqlalchemy.sql.dml import UpdateBase

from store import jsoncodec

SessionFactory = sessionmaker[Session]

# Connections a process keeps open: one per thread that may hold one at once (an API process
# serves 16 requests at a time, a node worker runs 8 scripts). A smaller pool closes and reopens
# a connection for every request past its size, which costs more than the query it serves.
POOL_SIZE = 16


def make_engine(url: str, pool_size: int = POOL_SIZE, **options: Any) -> Engine:
    """An engine with the settings each backend needs for concurrent API and worker processes."""
    in_memory = url in ("sqlite://", "sqlite:///:memory:")
    if "poolclass" not in options and not in_memory:
        options.update(pool_size=pool_size, max_overflow=POOL_SIZE)
    # JSON columns (a call's arguments and result) are written and read by orjson.
    options.setdefault("json_serializer", jsoncodec.encode)
    options.setdefault("json_deserializer", jsoncodec.decode)
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"timeout": 30, "check_same_thread": False}, **options
        )
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


# What a `core_transaction` yields: a SQLAlchemy Core connection in a transaction.
CoreConnection = Connection


@contextmanager
def core_transaction(sessions: SessionFactory) -> Iterator[CoreConnection]:
    """A Core connection of the sessions' engine in a transaction that commits when the block
    ends and rolls back on any error.

    For the rows every call and run write (a call, a run, a worker's claim and finish): a
    Session's bookkeeping and commit hooks cost as much again as their statements, and they
    need neither; their owner events go to the round trip that follows (relay/feed.py).
    """
    with sessions.kw["bind"].begin() as connection:
        yield connection


@contextmanager
def core_connection(sessions: SessionFactory) -> Iterator[Connection]:
    """A connection of the sessions' engine, for reads that need no Session."""
    with sessions.kw["bind"].connect() as connection:
        yield connection


_Row = TypeVar("_Row")


class CoreStatement:
    """A Core statement for a `core_transaction`'s connection (or a Session), executed with
    `Connection.execute`: SQLAlchemy compiles it once per dialect and keeps it in its cache.

    For the few statements every run executes (the worker's claim and finish, the call's
    answer), built once at import.
    """

    def __init__(self, statement: UpdateBase) -> None:
        self.statement = statement
        self.returning = len(statement.exported_columns) > 0  # its RETURNING columns

    def execute(
        self, connection: CoreConnection | Session, parameters: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """Run it with `parameters`; the RETURNING rows as dicts by column key."""
        result = connection.execute(self.statement, parameters)
        return [dict(row) for row in result.mappings()] if self.returning else []


def detached(model: type[_Row], values: Mapping[str, Any]) -> _Row:
    """A row of `model` from a table row's `values`, as if loaded by a Session since closed."""
    row = transient(model, values)
    make_transient_to_detached(row)
    return row


def transient(model: type[_Row], values: Mapping[str, Any]) -> _Row:
    """A new row of `model` holding `values`, made by its constructor, not saved yet.

    A key that is no column of `model` is refused, as the constructor refuses it.
    """
    mapper = inspect(model)
    unknown = values.keys() - _column_keys(mapper)
    if unknown:
        raise TypeError(f"{', '.join(sorted(unknown))} is not a column of {model.__name__}")
    return model(**values)


@functools.cache
def _column_keys(mapper: Mapper[Any]) -> frozenset[str]:
    return frozenset(mapper.columns.keys())


def save(session: Session, row: object) -> None:
    """Insert a new row (`insert_now`), or update one read in another session (merge costs a
    SELECT)."""
    if inspect(row).has_identity:
        session.merge(row)
    else:
        insert_now(session, row)


def insert_now(session: Session, row: Any) -> None:
    """Insert a new row of a table without relationships, whose key the row already holds, with
    one plain INSERT now; the row then belongs to the session as if it had been flushed, so
    later changes to it are saved as UPDATEs.

    Unlike a flush, a None left in a JSON column stays SQL NULL. Columns left unset get their
    defaults, on the row too.
    """
    insert_row(session, row)
    session.add(row)


def insert_row(connection: Session | CoreConnection, row: Any) -> None:
    """Insert a new row with one plain INSERT on a Session or a Core connection; the row is then
    detached, as if loaded. Columns left unset get their defaults, on the row too."""
    table = row.__table__
    values = {}
    for column in table.columns:
        key = column.key
        value = getattr(row, key)
        if value is None and column.default is not None:
            default = column.default
            value = default.arg(None) if default.is_callable else default.arg
            setattr(row, key, value)
        elif value is None:
            setattr(row, key, None)  # loaded, even as None: never read back
        if value is not None:  # left out, a NULL stays SQL NULL (not JSON null)
            values[key] = value
    connection.execute(_insert(table), values)
    make_transient_to_detached(row)  # every value set above counts as loaded, not changed


@functools.cache
def _insert(table: Table) -> Insert:
    return insert(table)

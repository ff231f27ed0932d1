"""Engines and sessions for SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy.exc
from sqlalchemy import (
    Connection,
    Dialect,
    Engine,
    Insert,
    Table,
    bindparam,
    create_engine,
    event,
    insert,
    inspect,
)
from sqlalchemy.engine.interfaces import DBAPIModule
from sqlalchemy.orm import (
    Mapper,
    Session,
    configure_mappers,
    make_transient_to_detached,
    sessionmaker,
)
from sqlalchemy.orm.attributes import instance_state, manager_of_class
from sqlalchemy.pool import PoolProxiedConnection
from sqlalchemy.sql.compiler import SQLCompiler
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


class DriverConnection:
    """A pooled DBAPI connection in a transaction: what `DriverStatement`s execute on.

    SQLAlchemy's Connection and its Transaction add their own CPU to every transaction, the
    more so in a process whose CPU caches a script's run has just emptied: with the caches
    flushed before each, a one-row UPDATE's transaction took 385-390 µs through a Connection
    and 267-322 µs on the pooled connection itself.
    """

    def __init__(self, pooled: PoolProxiedConnection, dialect: Dialect) -> None:
        self.pooled = pooled
        self.dialect = dialect

    @property
    def driver(self) -> Any:
        return self.pooled.dbapi_connection

    def error(
        self, e: DBAPIModule.Error, statement: str | None, parameters: Any, cursor: Any
    ) -> Exception:
        """The exception SQLAlchemy's execution raises for the driver's `e` (IntegrityError,
        OperationalError…); a connection the database dropped is not handed out again."""
        gone = self.dialect.is_disconnect(e, self.driver, cursor)
        if gone:
            self.pooled.invalidate(e)
        return _raised(self.dialect, e, statement, parameters, gone)


def _raised(
    dialect: Dialect, e: DBAPIModule.Error, statement: str | None, parameters: Any, gone: bool
) -> Exception:
    """The SQLAlchemy exception its own execution raises for the driver's error `e`."""
    return sqlalchemy.exc.DBAPIError.instance(
        statement, parameters, e, dialect.loaded_dbapi.Error,
        connection_invalidated=gone, dialect=dialect,
    )  # fmt: skip


@contextmanager
def core_transaction(sessions: SessionFactory) -> Iterator[DriverConnection]:
    """A pooled connection in a transaction that commits when the block ends, rolls back on any
    error, and goes back to the pool.

    For the rows every call and run write (a call, a run, a worker's claim and finish), with
    `DriverStatement`s only: a Session's bookkeeping and commit hooks cost as much again as
    their statements, and they need neither; their owner events go to the round trip that
    follows (relay/feed.py). Driver errors are raised as SQLAlchemy raises them.
    """
    engine: Engine = sessions.kw["bind"]
    dialect = engine.dialect
    try:
        pooled = engine.raw_connection()
    except dialect.loaded_dbapi.Error as e:
        raise _raised(dialect, e, None, None, dialect.is_disconnect(e, None, None)) from e
    connection = DriverConnection(pooled, dialect)
    try:
        yield connection
        try:
            pooled.commit()
        except dialect.loaded_dbapi.Error as e:
            raise connection.error(e, "COMMIT", None, None) from e
    except BaseException:
        if pooled.is_valid:
            with contextlib.suppress(dialect.loaded_dbapi.Error):
                pooled.rollback()
        raise
    finally:
        pooled.close()


@contextmanager
def core_connection(sessions: SessionFactory) -> Iterator[Connection]:
    """A connection of the sessions' engine, for reads that need no Session."""
    with sessions.kw["bind"].connect() as connection:
        yield connection


_Row = TypeVar("_Row")


class DriverStatement:
    """A Core statement compiled once per dialect and executed on the driver's own cursor, in
    the transaction of a `core_transaction`.

    For the few statements every run executes (the worker's claim and finish, the call's
    answer): SQLAlchemy's execution path costs more CPU than the statement, the more so in a
    worker whose CPU caches the script it just ran has emptied (a claim took 0.78 ms of CPU
    through `Connection.execute` and 0.42 ms through the driver, measured right after a
    script). Parameters and RETURNING values pass through the columns' own type processors,
    as SQLAlchemy's execution would pass them.
    """

    def __init__(self, statement: UpdateBase) -> None:
        self.statement = statement
        self._prepared: dict[str, _Prepared] = {}

    def execute(
        self, connection: DriverConnection, parameters: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """Run it with `parameters`; the RETURNING rows as dicts by column key."""
        dialect = connection.dialect
        prepared = self._prepared.get(dialect.name) or self._prepare(dialect)
        arguments = prepared.arguments(parameters)
        cursor = None
        try:
            cursor = connection.driver.cursor()
            cursor.execute(prepared.sql, arguments)
            rows = cursor.fetchall() if prepared.returning else []
        except dialect.loaded_dbapi.Error as e:
            raise connection.error(e, prepared.sql, arguments, cursor) from e
        finally:
            if cursor is not None:
                with contextlib.suppress(dialect.loaded_dbapi.Error):
                    cursor.close()
        return [prepared.row(values) for values in rows]

    def _prepare(self, dialect: Dialect) -> _Prepared:
        compiled = self.statement.compile(dialect=dialect)
        prepared = self._prepared[dialect.name] = _Prepared(compiled, dialect)
        return prepared


class _Prepared:
    """A statement's SQL for one dialect, with its parameters' and results' processors."""

    def __init__(self, compiled: SQLCompiler, dialect: Dialect) -> None:
        if compiled.insert_prefetch or compiled.update_prefetch:
            # SQLAlchemy's execution would compute these columns' defaults; this never does.
            raise ValueError("a DriverStatement needs a value for every column with a default")
        self.sql = compiled.string
        self.compiled = compiled
        self.order = list(compiled.positiontup or ()) if compiled.positional else None
        self.binds = {
            name: processor
            for name, bind in compiled.binds.items()
            if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
        }
        self.returning = [
            (str(column.key), column.type.dialect_impl(dialect).result_processor(dialect, None))
            for column in compiled.effective_returning or ()
        ]

    def arguments(self, parameters: Mapping[str, Any]) -> Any:
        values = self.compiled.construct_params(parameters)
        for name, processor in self.binds.items():
            values[name] = processor(values[name])
        if self.order is None:
            return values
        return [values[name] for name in self.order]

    def row(self, values: Any) -> dict[str, Any]:
        return {
            key: value if processor is None else processor(value)
            for (key, processor), value in zip(self.returning, values, strict=True)
        }


def detached(model: type[_Row], values: Mapping[str, Any]) -> _Row:
    """A row of `model` from a table row's `values`, as if loaded by a Session since closed.

    The values go into the instance's state as loading does, not through the constructor's
    instrumented attributes (a change event per column: 80 µs for a skill's 22 columns).
    """
    row = transient(model, values)
    make_transient_to_detached(row)
    return row


def transient(model: type[_Row], values: Mapping[str, Any]) -> _Row:
    """A new row of `model` holding `values`, as its constructor would make it, not saved yet.

    For the call and the run every run call makes: the values go into the instance's state at
    once, without the constructor's change event per column (`insert_row` and `insert_now`
    read that state). A key that is no column of `model` is refused, as the constructor
    refuses it.
    """
    manager = manager_of_class(model)
    if not manager.mapper.configured:  # as constructing one would, in a process new to the ORM
        configure_mappers()
    unknown = values.keys() - _column_keys(manager.mapper)
    if unknown:
        raise TypeError(f"{', '.join(sorted(unknown))} is not a column of {model.__name__}")
    row: _Row = manager.new_instance()
    instance_state(row).dict.update(values)
    return row


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

    What `session.add` and the flush at commit do, at about half the cost: for the rows every
    tool call and run writes. Columns left unset get their defaults, on the row too.
    """
    insert_row(session, row)
    session.add(row)


def insert_row(connection: Session | DriverConnection, row: Any) -> None:
    """Insert a new row with one plain INSERT on a Session or a driver's connection; the row is then
    detached, as if loaded. Columns left unset get their defaults, on the row too."""
    table = row.__table__
    given = instance_state(row).dict  # the values set on the row so far, by attribute name
    values = {}
    for column in table.columns:
        key = column.key
        value = given.get(key)
        if value is None and column.default is not None:
            default = column.default
            value = given[key] = default.arg(None) if default.is_callable else default.arg
        elif key not in given:
            given[key] = None  # loaded, even as None: never read back
        if value is not None:  # left out, a NULL stays SQL NULL (not JSON null)
            values[key] = value
    if isinstance(connection, DriverConnection):  # every call and run
        _driver_insert(table, frozenset(values)).execute(connection, values)
    else:
        connection.execute(_insert(table), values)
    make_transient_to_detached(row)  # every value set above counts as loaded, not changed


@functools.cache
def _insert(table: Table) -> Insert:
    return insert(table)


@functools.lru_cache(maxsize=64)
def _driver_insert(table: Table, keys: frozenset[str]) -> DriverStatement:
    """The INSERT of the columns `keys` into `table`, built once for each set of columns."""
    columns = table.columns
    return DriverStatement(
        insert(table).values({key: bindparam(key, type_=columns[key].type) for key in sorted(keys)})
    )

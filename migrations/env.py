"""Alembic environment: runs migrations on the URL given by store.migrate."""

from collections.abc import Iterator
from contextlib import contextmanager

from alembic import context
from sqlalchemy import Connection, pool

from store.db import make_engine
from store.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with _foreign_keys_off(connection), context.begin_transaction():
        context.run_migrations()


@contextmanager
def _foreign_keys_off(connection: Connection) -> Iterator[None]:
    """On SQLite, foreign keys are off while migrations run: batch mode copies a table and
    drops the old one, and that drop would delete (ON DELETE CASCADE) every row referring to
    it, such as the approvals of every tool call. SQLite ignores the pragma inside a
    transaction, so a connection handed over in one keeps its setting."""
    if connection.dialect.name != "sqlite" or connection.in_transaction():
        yield
        return
    connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    connection.commit()
    try:
        yield
    finally:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

"""A worker's claim of what it runs (a run, a turn): queued -> running, with the worker and the
time, by one conditional UPDATE ... RETURNING built once on the table rather than through the
ORM (store/db.py CoreStatement): every run and every turn makes one before its work starts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, bindparam, update
from sqlalchemy.orm import Session

from store.db import CoreConnection, CoreStatement
from store.models import utcnow
from store.states import Machine


def claim_statement(
    table: Table, machine: Machine[Any], queued: str, running: str
) -> CoreStatement:
    """The claim of a row of `table` for a worker."""
    return CoreStatement(
        update(table)
        .where(table.c.id == bindparam("row_id"), table.c.status == queued)
        .values(
            status=str(machine.check(queued, machine.states(running))),
            worker=bindparam("new_worker"),
            started_at=bindparam("new_started_at", type_=table.c.started_at.type),
        )
        .returning(*table.c)
    )


def claim_row(
    statement: CoreStatement, connection: CoreConnection | Session, row_id: str, worker: str
) -> list[dict[str, Any]]:
    """The row `statement` claimed for `worker`, or none when it was not queued."""
    parameters = {"row_id": row_id, "new_worker": worker, "new_started_at": utcnow()}
    return statement.execute(connection, parameters)

"""A run's state: the one writer of `runs.status`.

    queued -> running -> succeeded | failed | timed_out | cancelled | interrupted
    queued -> cancelled | failed                  (cancelled, or never sent to its queue)

Runs are created queued, claimed once, finished once; the reaper answers lost ones. Every move
is one conditional UPDATE, so a redelivered task or a racing cancel changes nothing twice.
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import String, Table, Update, bindparam, func, update
from sqlalchemy.orm import Session

from store.db import CoreConnection, CoreStatement, transient
from store.lifecycle.claims import claim_row, claim_statement
from store.models import Run, utcnow
from store.states import RUNS, RunStatus

# States a run can still leave; everything else is an end state.
ACTIVE_STATES = RUNS.open
END_STATES = RUNS.ends

# The worker's two writes of every run, built once on the table rather than through the ORM
# and run on the driver's cursor: each run then costs little more than their execution.
_RUNS = cast(Table, Run.__table__)
_CLAIM = claim_statement(_RUNS, RUNS, RunStatus.QUEUED, RunStatus.RUNNING)
# What a run's finish writes, beside its isolation.
FINISHED_COLUMNS = (
    "status", "exit_code", "stdout", "stderr", "error", "finished_at", "output_files",
)  # fmt: skip
_FINISH = CoreStatement(
    update(_RUNS)
    .where(_RUNS.c.id == bindparam("run_id"), _RUNS.c.status == RunStatus.RUNNING)
    .values(
        {
            **{
                column: bindparam(f"new_{column}", type_=_RUNS.c[column].type)
                for column in FINISHED_COLUMNS
            },
            # A run ended by the reaper keeps the isolation it had (None: not known).
            "isolation": func.coalesce(bindparam("new_isolation", type_=String), _RUNS.c.isolation),
        }
    )
    .returning(*_RUNS.c)
)


def new(values: dict[str, Any]) -> Run:
    """A queued run (not saved yet)."""
    return transient(Run, {**values, "status": RUNS.created(RunStatus.QUEUED)})


def claim(connection: CoreConnection, run_id: str, worker: str) -> list[dict[str, Any]]:
    """queued -> running for this worker: the run's row, or none if it was not queued."""
    return claim_row(_CLAIM, connection, run_id, worker)


def finish(
    connection: CoreConnection, run_id: str, status: str, values: dict[str, Any]
) -> list[dict[str, Any]]:
    """running -> `status`, with `values` (exit_code, stdout, stderr, error, isolation,
    output_files): the run's row, or none if it was not running."""
    RUNS.check(RunStatus.RUNNING, RunStatus(status))
    parameters: dict[str, Any] = {"new_output_files": None}
    parameters.update({f"new_{key}": value for key, value in values.items()})
    parameters.update(run_id=run_id, new_status=status, new_finished_at=utcnow())
    return _FINISH.execute(connection, parameters)


def abandon(session: Session, run_id: str, message: str) -> Run | None:
    """queued -> failed, for a run that could not be sent to its queue; None if not queued."""
    return session.scalars(
        _move(run_id, RunStatus.QUEUED, RunStatus.FAILED)
        .values(error=message, finished_at=utcnow())
        .returning(Run)
        .execution_options(synchronize_session=False)
    ).one_or_none()


def cancel_queued(session: Session, run_id: str) -> bool:
    """queued -> cancelled, for a run no worker claimed yet."""
    stopped = session.execute(
        _move(run_id, RunStatus.QUEUED, RunStatus.CANCELLED).values(
            finished_at=utcnow(), error="Cancelled before it started."
        )
    )
    return int(stopped.rowcount) == 1  # type: ignore[attr-defined]


def _move(run_id: str, source: RunStatus, status: RunStatus) -> Update:
    RUNS.check(source, status)
    return update(Run).where(Run.id == run_id, Run.status == source).values(status=status)

"""How a task tells Celery the way its work ended, so that Flower shows it.

Flower learns a task's end from the worker's events alone: a task that returns is SUCCESS, one
that raises is FAILURE (and counts in its worker's "Failed"). Our tasks record every end in
the database themselves, so a run that failed, timed out, was cancelled or interrupted would
show as SUCCESS. `report` raises `NotSucceeded` for those, once the end is recorded.

Raising changes nothing else: the tasks are declared with `throws` (Celery logs the end at
INFO, not as an error with a traceback) and `acks_on_failure`, so the message is acknowledged
like a returned one, never retried or delivered again; a later delivery would find its run
claimed anyway.
"""

from __future__ import annotations

from typing import Any

from store.db import SessionFactory
from store.models import JobRun, Run, Turn
from store.states import JOB_RUNS, RUNS, TURNS, Machine

Row = type[Run] | type[JobRun] | type[Turn]
MACHINES: dict[Row, Machine[Any]] = {Run: RUNS, JobRun: JOB_RUNS, Turn: TURNS}
# The ends that are not a success; a skipped job run never had a task.
SUCCESSES = frozenset({"succeeded", "skipped"})


class NotSucceeded(Exception):
    """Raised by a task whose run, job run or turn ended without succeeding, after that end
    was recorded: Celery then marks the task FAILURE. The message names the run's id."""


# The Celery options of every task that reports through `report`: the exception is expected
# (logged at INFO, below the workers' level for Celery) and its message is acknowledged.
REPORTING: dict[str, Any] = {"throws": (NotSucceeded,), "acks_on_failure": True}


def failing(machine: Machine[Any]) -> frozenset[str]:
    """The end states of `machine` that fail a task."""
    return frozenset(machine.ends) - SUCCESSES


def report(sessions: SessionFactory, row: Row, key: str, status: str | None) -> str | None:
    """`status`, the end this task recorded (None: it found the work taken or ended), as the
    task's result; raise NotSucceeded when the work ended without succeeding.

    A delivery that ran nothing says how its run had ended, if it had: a run cancelled while
    queued, or interrupted after its worker died, shows in Flower only through it.
    """
    machine = MACHINES[row]
    bad = failing(machine)
    if status is not None and status not in bad:
        return status  # succeeded, or a job run left waiting for the owner
    ended, detail = _end(sessions, row, key) or (status, "")
    if ended is None or ended not in bad:
        return status
    what = f"{machine.name} {key}"
    if status is None:
        raise NotSucceeded(f"{what} had already ended {ended}{detail}; this delivery ran nothing.")
    raise NotSucceeded(f"{what} ended {ended}{detail}.")


def _end(sessions: SessionFactory, row: Row, key: str) -> tuple[str, str] | None:
    """The row's status and why, as a parenthesis (a run's exit code, or the error's code);
    None once the row is gone."""
    with sessions() as session:
        found = session.get(row, key)
        if isinstance(found, Run):
            why = None if found.exit_code is None else f"exit code {found.exit_code}"
        elif isinstance(found, (JobRun, Turn)):
            why = found.error_code
        else:
            return None
        return found.status, f" ({why})" if why else ""

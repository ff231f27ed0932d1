"""A job run's state: the one writer of `job_runs.status`.

    queued -> running -> succeeded | failed                   (steps in order, first failure stops)
    running -> waiting -> running                              (a step waits for the owner)
    running | waiting -> unanswered | failed                   (nobody answered / the owner said no)
    running -> interrupted                                     (its worker died; never run again)
    queued -> failed                                           (never sent to the control queue)
    skipped                                                    (recorded instead of a run)

Every change is one conditional UPDATE on the run's current state, so of two writers racing
(a redelivered task, the reaper) exactly one wins.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from store import ownerevents
from store.errors import JobRunEnded, JobRunNotFound
from store.limits import KEPT_JOB_RUNS
from store.models import Job, JobRun, utcnow
from store.states import JOB_RUNS, JobRunStatus

ACTIVE_STATES = (JobRunStatus.QUEUED, JobRunStatus.RUNNING, JobRunStatus.WAITING)
END_STATES = JOB_RUNS.ends
# The end states the owner hears about on the event feed (with waiting, which is not an end).
NOTIFIED = (
    JobRunStatus.WAITING,
    JobRunStatus.FAILED,
    JobRunStatus.UNANSWERED,
    JobRunStatus.INTERRUPTED,
)
MANUAL = "manual"
SCHEDULE = "schedule"


def queue(session: Session, job: Job, trigger: str, due_at: datetime | None = None) -> JobRun:
    """A new queued run of `job`; older ended runs beyond the newest 50 are dropped."""
    run = _new(job, trigger, due_at, JobRunStatus.QUEUED)
    session.add(run)
    session.flush()
    _prune(session, job.id)
    ownerevents.note_job_run(session, job.owner_id, job.id, run.id, run.status)
    return run


def skip(session: Session, job: Job, due_at: datetime | None, code: str, message: str) -> JobRun:
    """Record a due time that did not run (the job was still running, or the ticker was down)."""
    run = _new(job, SCHEDULE, due_at, JobRunStatus.SKIPPED)
    run.error_code, run.error_message = code, message
    run.finished_at = run.created_at
    session.add(run)
    session.flush()
    _prune(session, job.id)
    ownerevents.note_job_run(session, job.owner_id, job.id, run.id, run.status)
    return run


def claim(session: Session, run_id: str, worker: str) -> JobRun | None:
    """queued -> running for this worker; None when it was claimed or ended before."""
    return _move(
        session,
        run_id,
        (JobRunStatus.QUEUED,),
        status=JobRunStatus.RUNNING,
        worker=worker,
        started_at=utcnow(),
    )


def abandon(session: Session, run_id: str, message: str) -> bool:
    """queued -> failed: the run could not be sent to the control queue."""
    moved = _move(
        session,
        run_id,
        (JobRunStatus.QUEUED,),
        status=JobRunStatus.FAILED,
        error_code="service_unavailable",
        error_message=message,
        **_ended(),
    )
    return moved is not None


def resume(session: Session, run_id: str, worker: str) -> JobRun | None:
    """waiting -> running for this worker, once the call it waited on is answered."""
    return _move(
        session,
        run_id,
        (JobRunStatus.WAITING,),
        status=JobRunStatus.RUNNING,
        worker=worker,
        approval_id=None,
    )


def calling(session: Session, run_id: str, worker: str, call_id: str | None) -> bool:
    """Note the open call of the current step (a running script the run waits on)."""
    return _running(session, run_id, worker, call_id=call_id) is not None


def step_done(session: Session, run: JobRun, worker: str, outcome: dict[str, Any]) -> bool:
    """The current step ended well: keep its outcome and move on to the next step."""
    steps = [*run.steps, outcome]
    moved = _running(session, run.id, worker, steps=steps, step=run.step + 1, call_id=None)
    if moved is not None:
        run.steps, run.step, run.call_id = steps, run.step + 1, None
    return moved is not None


def wait(session: Session, run_id: str, worker: str, call_id: str, approval_id: str | None) -> bool:
    """running -> waiting: the current step's call waits for the owner's answer."""
    return (
        _running(
            session,
            run_id,
            worker,
            status=JobRunStatus.WAITING,
            call_id=call_id,
            approval_id=approval_id,
        )
        is not None
    )


def succeed(session: Session, run: JobRun, worker: str) -> bool:
    return _running(session, run.id, worker, status=JobRunStatus.SUCCEEDED, **_ended()) is not None


def fail(
    session: Session,
    run: JobRun,
    status: JobRunStatus,
    code: str,
    message: str,
    outcome: dict[str, Any] | None = None,
) -> bool:
    """End a running or waiting run `failed` or `unanswered`, with the step that stopped it."""
    assert status in (JobRunStatus.FAILED, JobRunStatus.UNANSWERED)
    values: dict[str, Any] = {"status": status, "error_code": code, "error_message": message}
    if outcome is not None:
        values["steps"] = [*run.steps, outcome]
    moved = _move(
        session, run.id, (JobRunStatus.RUNNING, JobRunStatus.WAITING), **values, **_ended()
    )
    return moved is not None


def interrupt(session: Session, run_id: str, worker: str, message: str) -> JobRun | None:
    """running -> interrupted: its worker stopped; the run is never started again."""
    return _move(
        session,
        run_id,
        (JobRunStatus.RUNNING,),
        worker_is=worker,
        status=JobRunStatus.INTERRUPTED,
        error_code="interrupted",
        error_message=message,
        **_ended(),
    )


def active_run(session: Session, job_id: str) -> JobRun | None:
    """The job's queued, running or waiting run, if any."""
    query = select(JobRun).where(JobRun.job_id == job_id, JobRun.status.in_(ACTIVE_STATES))
    return session.scalars(query.limit(1)).first()


def owned_run(session: Session, owner_id: int, run_id: str) -> JobRun:
    """The owner's job run; another owner's or a missing one is not found."""
    run = session.get(JobRun, run_id)
    if run is None or run.owner_id != owner_id:
        raise JobRunNotFound(f"You have no job run '{run_id}'.")
    return run


def job_of_call(session: Session, owner_id: int, run_id: str) -> str:
    """The job id whose grants a call in job run `run_id` may use; the run must be active."""
    run = owned_run(session, owner_id, run_id)
    if run.status not in ACTIVE_STATES:
        raise JobRunEnded(f"The job run '{run_id}' already ended: it is {run.status}.")
    return run.job_id


def _new(job: Job, trigger: str, due_at: datetime | None, status: JobRunStatus) -> JobRun:
    return JobRun(
        id=str(uuid.uuid4()),
        job_id=job.id,
        owner_id=job.owner_id,
        trigger=trigger,
        due_at=due_at,
        status=JOB_RUNS.created(status),
        step=0,
        steps=[],
        created_at=utcnow(),
    )


def _ended() -> dict[str, Any]:
    return {"finished_at": utcnow(), "call_id": None, "approval_id": None}


def _running(session: Session, run_id: str, worker: str, **values: Any) -> JobRun | None:
    """Change a run this worker holds as running."""
    return _move(session, run_id, (JobRunStatus.RUNNING,), worker_is=worker, **values)


def _move(
    session: Session,
    run_id: str,
    sources: tuple[JobRunStatus, ...],
    worker_is: str | None = None,
    **values: Any,
) -> JobRun | None:
    if "status" in values:  # a move the table does not list is a bug, refused before any SQL
        for source in sources:
            JOB_RUNS.check(source, values["status"])
    statement = update(JobRun).where(JobRun.id == run_id, JobRun.status.in_(sources))
    if worker_is is not None:
        statement = statement.where(JobRun.worker == worker_is)
    moved = session.scalars(
        statement.values(**values).returning(JobRun).execution_options(synchronize_session=False)
    ).one_or_none()
    if moved is not None and "status" in values:
        ownerevents.note_job_run(session, moved.owner_id, moved.job_id, run_id, values["status"])
    return moved


def _prune(session: Session, job_id: str) -> None:
    """Keep the newest KEPT_JOB_RUNS runs of a job; a run still active is never dropped."""
    keep = (
        select(JobRun.id)
        .where(JobRun.job_id == job_id)
        .order_by(JobRun.created_at.desc(), JobRun.id.desc())
        .limit(KEPT_JOB_RUNS)
    )
    kept = set(session.scalars(keep))
    session.execute(
        delete(JobRun)
        .where(
            JobRun.job_id == job_id,
            JobRun.status.in_(END_STATES),
            JobRun.id.not_in(kept),
        )
        .execution_options(synchronize_session=False)
    )

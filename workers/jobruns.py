"""Job runs on the control worker: the minute tick, running steps, resuming, reaping.

A run's steps go through the broker exactly like a chat's calls, with the run's id as
`job_run_id`. A step that waits for the owner (an approval, or ask_owner's question) leaves the
run `waiting` and frees the worker; the answer (or the expiry) sends the run's task again and it
carries on from there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import redis
import structlog
from sqlalchemy import select, update

from broker.broker import Broker
from broker.calls import CallRequest
from broker.modelaccess import LiteLLM
from relay import events, heartbeat
from relay.retention import DEFAULT_CAPS, StreamCaps
from store import modelsettings
from store.cron import latest_time, next_time
from store.db import SessionFactory, transaction
from store.egress import Egress
from store.errors import SkillfleetError
from store.lifecycle import jobruns
from store.lifecycle import turns as turnstates
from store.lifecycle.calls import OPEN_STATES
from store.limits import JOB_MISSED_GRACE_SECONDS
from store.modelchoice import ModelChoice
from store.models import Job, JobRun, ToolCall, Turn, utcnow
from store.secrets import Sealer
from store.settings import DEFAULT_TURN_TIMEOUT
from store.states import CallStatus, JobRunStatus, TurnStatus
from workers import turns

log = structlog.get_logger(__name__)

NO_MODEL = (
    "No model is configured, so a prompt step can't run an agent turn; "
    "the run stopped at this step."
)
LOST_WORKER = "The control worker running this job stopped; the run will not be started again."
# A step's call in these waits for the owner (an approval, or ask_owner's question).
FOR_OWNER = (CallStatus.PENDING_APPROVAL, CallStatus.PENDING_QUESTION)


@dataclass
class JobContext:
    """What running a job needs: the database, Redis, the broker and this worker's id."""

    sessions: SessionFactory
    redis: redis.Redis
    broker: Broker
    worker: str
    # How long a step's call may stay running (a script) before the job gives up on it.
    step_limit: float
    # Prompt steps: the key that opens the owner's model API key, and a turn's time limit.
    sealer: Sealer | None = None
    turn_limit: float = DEFAULT_TURN_TIMEOUT
    caps: StreamCaps = DEFAULT_CAPS  # what a prompt step's turn stream holds and how long
    egress: Egress = field(default_factory=Egress)  # where a prompt step's model may be
    litellm: LiteLLM = field(default_factory=LiteLLM)  # minted keys of LiteLLM sources


# -- the tick ------------------------------------------------------------------------


def tick(sessions: SessionFactory, now: datetime | None = None) -> list[str]:
    """Queue a run of every enabled job whose cron time has come; the ids to send.

    Each due time is claimed once by moving `next_run_at` past now, so a late or repeated
    tick never starts a time twice and downtime leaves no backlog: only the latest missed
    time counts, and it is recorded `skipped` when it is older than the grace period.
    """
    now = now or utcnow()
    query = select(Job.id, Job.next_run_at).where(Job.enabled.is_(True), Job.next_run_at <= now)
    with sessions() as session:
        due = list(session.execute(query))
    queued = []
    for job_id, due_at in due:
        assert due_at is not None
        with transaction(sessions) as session:
            run_id = _start_due(session, job_id, due_at, now)
        if run_id is not None:
            queued.append(run_id)
    return queued


def _start_due(session: Any, job_id: str, due_at: datetime, now: datetime) -> str | None:
    job = session.get(Job, job_id)
    if job is None:
        return None
    claimed = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.next_run_at == due_at, Job.enabled.is_(True))
        .values(next_run_at=next_time(job.cron, job.time_zone, now))
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:  # another tick took this time
        return None
    latest = latest_time(job.cron, job.time_zone, now)
    if now - latest > timedelta(seconds=JOB_MISSED_GRACE_SECONDS):
        jobruns.skip(
            session, job, latest, "missed", "skillfleet was not running when this time came."
        )
        return None
    active = jobruns.active_run(session, job.id)
    if active is not None:
        message = f"The previous run ({active.id}) was still {active.status}."
        jobruns.skip(session, job, latest, "still_running", message)
        log.info("job skipped: still running", job_id=job.id, run_id=active.id)
        return None
    run = jobruns.queue(session, job, jobruns.SCHEDULE, latest)
    return run.id


def settled_waiting(sessions: SessionFactory) -> list[str]:
    """Waiting runs whose call was answered or expired: they can carry on."""
    query = (
        select(JobRun.id)
        .join(ToolCall, ToolCall.id == JobRun.call_id)
        .where(JobRun.status == JobRunStatus.WAITING, ToolCall.status.notin_(FOR_OWNER))
    )
    with sessions() as session:
        return list(session.scalars(query))


def reap(sessions: SessionFactory, client: redis.Redis) -> list[str]:
    """Answer `interrupted` for running job runs whose control worker stopped beating."""
    with sessions() as session:
        running = list(
            session.execute(
                select(JobRun.id, JobRun.worker).where(JobRun.status == JobRunStatus.RUNNING)
            )
        )
    reaped = []
    gone = heartbeat.lost_among(client, [worker for _, worker in running if worker])
    for run_id, worker in running:
        if worker not in gone:
            continue
        with transaction(sessions) as session:
            run = jobruns.interrupt(session, run_id, worker, LOST_WORKER)
            job = session.get(Job, run.job_id) if run is not None else None
        if run is not None and job is not None:
            _notify(client, job, run, JobRunStatus.INTERRUPTED, LOST_WORKER)
            reaped.append(run_id)
    return reaped


# -- a run ---------------------------------------------------------------------------


def execute(context: JobContext, run_id: str) -> str | None:
    """Run (or carry on with) one job run; a redelivered message finds it taken and stops."""
    run = _claim(context, run_id)
    if run is None:
        log.info("job run already taken or still waiting; nothing to do", job_run_id=run_id)
        return None
    with context.sessions() as session:
        job = session.get(Job, run.job_id)
    if job is None:
        return None
    if run.call_id is not None:  # carrying on: the call the run waited for was answered
        ended = _settle(context, job, run, run.call_id)
        if ended is not None:
            return ended
    while run.step < len(job.steps):
        ended = _step(context, job, run)
        if ended is not None:
            return ended
    with transaction(context.sessions) as session:
        jobruns.succeed(session, run, context.worker)
    log.info("job run succeeded", job_id=job.id, job_run_id=run.id)
    return JobRunStatus.SUCCEEDED


def _claim(context: JobContext, run_id: str) -> JobRun | None:
    with transaction(context.sessions) as session:
        run = jobruns.claim(session, run_id, context.worker)
    if run is not None:
        return run
    with context.sessions() as session:
        current = session.get(JobRun, run_id)
        call = session.get(ToolCall, current.call_id) if current and current.call_id else None
    if current is None or current.status != JobRunStatus.WAITING or call is None:
        return None
    if call.status in FOR_OWNER:
        return None
    with transaction(context.sessions) as session:
        return jobruns.resume(session, run_id, context.worker)


def _step(context: JobContext, job: Job, run: JobRun) -> str | None:
    """Run the current step; the run's end state when it stopped, None to go on."""
    step = job.steps[run.step]
    number = run.step + 1
    if "prompt" in step:
        return _prompt(context, job, run, str(step["prompt"]))
    request = CallRequest(
        tool=step["tool"],
        arguments=dict(step.get("arguments") or {}),
        job_run_id=run.id,
        turn_id=f"job-run:{run.id}",
        mode="execute",
    )
    try:
        call_id = context.broker.call(job.owner_id, request).call_id
    except SkillfleetError as e:
        failed = {"step": number, "tool": step["tool"], "status": "failed", "error_code": e.code}
        return _end(context, job, run, JobRunStatus.FAILED, e.code, e.message, failed)
    return _settle(context, job, run, call_id)


def _prompt(context: JobContext, job: Job, run: JobRun, prompt: str) -> str | None:
    """Run a prompt step as an agent turn in this run; the step ends as the turn does."""
    number = run.step + 1
    sealer = context.sealer
    choice = ModelChoice(job.model_source, job.model, job.reasoning_effort, job.context)
    try:
        missing = (
            sealer is None
            or modelsettings.load(context.sessions, sealer, job.owner_id, choice) is None
        )
    except SkillfleetError as e:  # a source the job names that is gone
        failed = {"step": number, "kind": "prompt", "status": "failed", "error_code": e.code}
        return _end(context, job, run, JobRunStatus.FAILED, e.code, e.message, failed)
    if sealer is None or missing:
        failed = {"step": number, "kind": "prompt", "status": "failed", "error_code": "no_model"}
        return _end(context, job, run, JobRunStatus.FAILED, "no_model", NO_MODEL, failed)
    with transaction(context.sessions) as session:
        turn_id = turnstates.create(session, job.owner_id, prompt, job_run_id=run.id).id
    with transaction(context.sessions) as session:
        turn = turnstates.claim(session, turn_id, context.worker)
    assert turn is not None  # nobody else knows this turn yet
    turn_context = turns.TurnContext(
        context.sessions,
        context.redis,
        context.broker,
        sealer,
        context.worker,
        context.turn_limit,
        context.caps,
        context.egress,
        context.litellm,
        choice,
    )
    status = turns.run_claimed(turn_context, turn)
    with context.sessions() as session:
        ended = session.get(Turn, turn_id)
    assert ended is not None  # made above; a turn is removed only with its owner
    outcome: dict[str, Any] = {"step": number, "kind": "prompt", "turn_id": turn_id}
    if status == TurnStatus.SUCCEEDED:
        outcome.update(status="done", calls=ended.calls)
        with transaction(context.sessions) as session:
            moved = jobruns.step_done(session, run, context.worker, outcome)
        return None if moved else run.status
    code = ended.error_code or str(status)
    message = ended.error_message or f"Step {number} (prompt) ended {status}."
    outcome.update(status="failed", error_code=code)
    return _end(context, job, run, JobRunStatus.FAILED, code, message, outcome)


def _settle(context: JobContext, job: Job, run: JobRun, call_id: str) -> str | None:
    """Act on the current step's call: go on, wait for the owner, or stop the run."""
    call = context.broker.get_call(job.owner_id, call_id)
    if call.status == CallStatus.RUNNING:
        with transaction(context.sessions) as session:
            jobruns.calling(session, run.id, context.worker, call_id)
        call = _wait_for(context, job.owner_id, call_id)
    outcome = {
        "step": run.step + 1,
        "tool": call.tool,
        "call_id": call.id,
        "status": call.status,
        "run_id": call.run_id,
    }
    if call.status == CallStatus.DONE:
        with transaction(context.sessions) as session:
            moved = jobruns.step_done(session, run, context.worker, outcome)
        return None if moved else run.status
    if call.status == CallStatus.PENDING_APPROVAL:
        assert call.approval_id is not None
        with transaction(context.sessions) as session:
            waiting = jobruns.wait(session, run.id, context.worker, call.id, call.approval_id)
        if waiting:
            message = f"Step {run.step + 1} ({call.tool}) waits for your approval."
            _notify(context.redis, job, run, JobRunStatus.WAITING, message, call.approval_id)
        return JobRunStatus.WAITING
    if call.status == CallStatus.PENDING_QUESTION:
        with transaction(context.sessions) as session:
            waiting = jobruns.wait(session, run.id, context.worker, call.id, None)
        if waiting:
            message = f"Step {run.step + 1} ({call.tool}) waits for your answer."
            _notify(context.redis, job, run, JobRunStatus.WAITING, message)
        return JobRunStatus.WAITING
    outcome["error_code"] = call.error_code
    if call.status == CallStatus.RUNNING:
        code, message = "step_timed_out", "The step's call did not end in time; the run stopped."
        return _end(context, job, run, JobRunStatus.FAILED, code, message, outcome)
    status = JobRunStatus.UNANSWERED if call.status == CallStatus.EXPIRED else JobRunStatus.FAILED
    code = call.error_code or str(call.status)
    message = call.error_message or f"Step {run.step + 1} ended {call.status}."
    return _end(context, job, run, status, code, message, outcome)


def _wait_for(context: JobContext, owner_id: int, call_id: str) -> ToolCall:
    """The call once it left `running`, or as it is when the step limit ran out."""
    deadline = time.monotonic() + context.step_limit
    while True:
        left = deadline - time.monotonic()
        call = context.broker.get_call(owner_id, call_id, wait=max(0.0, left))
        if call.status not in OPEN_STATES or left <= 0:
            return call


def _end(
    context: JobContext,
    job: Job,
    run: JobRun,
    status: JobRunStatus,
    code: str,
    message: str,
    outcome: dict[str, Any],
) -> str:
    with transaction(context.sessions) as session:
        ended = jobruns.fail(session, run, status, code, message, outcome)
    if ended:
        _notify(context.redis, job, run, status, message)
        log.info("job run stopped", job_id=job.id, job_run_id=run.id, status=status, code=code)
    return status


def _notify(
    client: redis.Redis,
    job: Job,
    run: JobRun,
    status: JobRunStatus,
    message: str,
    approval_id: str | None = None,
) -> None:
    """Tell the owner about a run that needs them (waiting, failed, unanswered, interrupted)."""
    data: dict[str, Any] = {
        "job_id": job.id,
        "job_name": job.name,
        "job_run_id": run.id,
        "status": str(status),
        "message": message,
    }
    if approval_id is not None:
        data["approval_id"] = approval_id
    events.publish(client, job.owner_id, f"job_run.{status}", **data)

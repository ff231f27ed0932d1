"""Celery tasks: thin wrappers that take ids, load state and call a domain function.

A task whose run, job run or turn ends without succeeding raises once the end is recorded, so
Flower shows it failed; its message is acknowledged all the same (workers/outcomes.py).
"""

from __future__ import annotations

from datetime import timedelta

import structlog
from celery import Task, shared_task

from broker.dispatcher import EXECUTE_TASK
from broker.runs import resend_unsent
from relay.dispatch import RUN_JOB_TASK, RUN_TURN_TASK, send_job_run, send_run
from relay.notifier import NOTIFY_TASK
from relay.retention import StreamCaps
from store import tracing
from store.models import JobRun, Run, Turn
from workers import jobruns, notify, turns
from workers.context import (
    control_context,
    job_context,
    notify_context,
    turn_context,
    worker_context,
)
from workers.execute import execute
from workers.housekeeping import housekeep, sweep
from workers.outcomes import REPORTING, report

log = structlog.get_logger(__name__)


@shared_task(name="skillfleet.execute_run", bind=True, **REPORTING)
def execute_run(self: Task, run_id: str) -> str | None:
    """Run one script: the message carries the run id only."""
    with structlog.contextvars.bound_contextvars(run_id=run_id):
        context = worker_context(self.app)
        with tracing.quiet_if_unsampled():
            with tracing.span("skillfleet.run", run_id=run_id, node=context.instance.label):
                status = execute(context, run_id)
                tracing.note(status=status)
            return report(context.sessions, Run, run_id, status)


@shared_task(name="skillfleet.housekeeping", bind=True, send_events=False)
def housekeeping(self: Task) -> int:
    """Answer `interrupted` for work whose worker stopped beating; trim ended streams."""
    context = control_context(self.app)
    caps = StreamCaps.of(self.app.skillfleet_settings)
    return housekeep(context.sessions, context.redis, caps)


@shared_task(name="skillfleet.sweep", bind=True, send_events=False)
def sweep_minute(self: Task) -> int:
    """Expire approvals nobody answered and files past their time; deliver notices a lost wake
    left behind; send once more the runs queued long enough to have lost their message."""
    context = control_context(self.app)
    retention = timedelta(days=self.app.skillfleet_settings.audit_retention_days)
    expired = sweep(
        context.sessions,
        lambda job_run_id: send_job_run(self.app, job_run_id),
        audit_retention=retention,
    )
    expired += context.files.expire()
    notify.pump(notify_context(self.app))
    # Last: Redis being away fails the task here, after the rest of the round.
    resent = resend_unsent(
        context.sessions,
        context.redis,
        lambda run_id, queue: send_run(self.app, EXECUTE_TASK, run_id, queue),
    )
    if resent:
        log.warning("queued runs sent again", runs=resent)
    return expired


@shared_task(name=RUN_JOB_TASK, bind=True, **REPORTING)
def run_job(self: Task, job_run_id: str) -> str | None:
    """Run a job run, or carry on with one whose waiting call was answered: ids only."""
    with structlog.contextvars.bound_contextvars(job_run_id=job_run_id):
        context = job_context(self.app)
        return report(context.sessions, JobRun, job_run_id, jobruns.execute(context, job_run_id))


@shared_task(name="skillfleet.job_tick", bind=True)
def job_tick(self: Task) -> int:
    """Start every job whose cron time has come; carry on with runs whose approval was answered."""
    context = control_context(self.app)
    queued = jobruns.tick(context.sessions)
    for job_run_id in [*queued, *jobruns.settled_waiting(context.sessions)]:
        send_job_run(self.app, job_run_id)
    return len(queued)


@shared_task(name=RUN_TURN_TASK, bind=True, **REPORTING)
def run_turn(self: Task, turn_id: str) -> str | None:
    """Run one agent turn on the control worker: the message carries the turn id only."""
    with structlog.contextvars.bound_contextvars(turn_id=turn_id):
        context = turn_context(self.app)
        return report(context.sessions, Turn, turn_id, turns.execute(context, turn_id))


@shared_task(name=NOTIFY_TASK, bind=True)
def notify_owner(self: Task, owner_id: str | None = None) -> int:
    """Turn the owner's new events (every listening owner's, without one) into Web Push
    messages and webhook deliveries; retry due ones."""
    context = notify_context(self.app)
    if owner_id is None:
        return notify.pump(context)
    return notify.deliver(context, int(owner_id))

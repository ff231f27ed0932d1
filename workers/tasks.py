"""Celery tasks: thin wrappers that take ids, load state and call a domain function."""

from __future__ import annotations

import structlog
from celery import Task, shared_task

from relay.dispatch import RUN_JOB_TASK, RUN_TURN_TASK, send_job_run
from store.runs import reap
from workers import jobruns, notify, turns
from workers.context import (
    control_context,
    job_context,
    notify_context,
    turn_context,
    worker_context,
)
from workers.execute import execute

log = structlog.get_logger(__name__)


@shared_task(name="skillfleet.execute_run", bind=True)
def execute_run(self: Task, run_id: str) -> str | None:
    """Run one script: the message carries the run id only."""
    with structlog.contextvars.bound_contextvars(run_id=run_id):
        return execute(worker_context(self.app), run_id)


@shared_task(name="skillfleet.reap", bind=True)
def reap_runs(self: Task) -> int:
    """Answer `interrupted` for runs and job runs whose worker stopped heartbeating."""
    context = control_context(self.app)
    reaped = reap(context.sessions, context.redis)
    if reaped:
        log.warning("runs interrupted", runs=reaped)
    lost_jobs = jobruns.reap(context.sessions, context.redis)
    if lost_jobs:
        log.warning("job runs interrupted", job_runs=lost_jobs)
    lost_turns = turns.reap(context.sessions, context.redis)
    if lost_turns:
        log.warning("turns interrupted", turns=lost_turns)
    return len(reaped) + len(lost_jobs) + len(lost_turns)


@shared_task(name="skillfleet.expire_approvals", bind=True)
def expire_approvals(self: Task) -> int:
    """Mark approvals nobody answered within 30 minutes `expired`; drop old turn counts."""
    from broker.approvals import expire_due
    from broker.turns import forget_old
    from store.db import transaction

    context = control_context(self.app)
    with transaction(context.sessions) as session:
        forget_old(session)
        expired = expire_due(session)
    # A job run waiting on an approval that just expired ends `unanswered`.
    for job_run_id in jobruns.settled_waiting(context.sessions):
        send_job_run(self.app, job_run_id)
    return expired


@shared_task(name=RUN_JOB_TASK, bind=True)
def run_job(self: Task, job_run_id: str) -> str | None:
    """Run a job run, or carry on with one whose waiting call was answered: ids only."""
    with structlog.contextvars.bound_contextvars(job_run_id=job_run_id):
        return jobruns.execute(job_context(self.app), job_run_id)


@shared_task(name="skillfleet.job_tick", bind=True)
def job_tick(self: Task) -> int:
    """Start every job whose cron time has come; carry on with runs whose approval was answered."""
    context = control_context(self.app)
    queued = jobruns.tick(context.sessions)
    for job_run_id in [*queued, *jobruns.settled_waiting(context.sessions)]:
        send_job_run(self.app, job_run_id)
    return len(queued)


@shared_task(name=RUN_TURN_TASK, bind=True)
def run_turn(self: Task, turn_id: str) -> str | None:
    """Run one agent turn on the control worker: the message carries the turn id only."""
    with structlog.contextvars.bound_contextvars(turn_id=turn_id):
        return turns.execute(turn_context(self.app), turn_id)


@shared_task(name=notify.NOTIFY_TASK, bind=True)
def notify_owners(self: Task) -> int:
    """Turn new owner events into Web Push messages and webhook deliveries; retry due ones."""
    return notify.pump(notify_context(self.app))

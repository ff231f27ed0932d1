"""Celery tasks: thin wrappers that take ids, load state and call a domain function."""

from __future__ import annotations

import structlog
from celery import Task, shared_task

from workers.context import control_context, worker_context
from workers.execute import execute
from workers.runs import reap

log = structlog.get_logger(__name__)


@shared_task(name="skillfleet.execute_run", bind=True)
def execute_run(self: Task, run_id: str) -> str | None:
    """Run one script: the message carries the run id only."""
    with structlog.contextvars.bound_contextvars(run_id=run_id):
        return execute(worker_context(self.app), run_id)


@shared_task(name="skillfleet.reap", bind=True)
def reap_runs(self: Task) -> int:
    """Answer `interrupted` for runs whose worker stopped heartbeating."""
    context = control_context(self.app)
    reaped = reap(context.sessions, context.redis)
    if reaped:
        log.warning("runs interrupted", runs=reaped)
    return len(reaped)


@shared_task(name="skillfleet.expire_approvals", bind=True)
def expire_approvals(self: Task) -> int:
    """Mark approvals nobody answered within 30 minutes `expired`; drop old turn counts."""
    from broker.approvals import expire_due
    from broker.turns import forget_old
    from store.db import transaction

    context = control_context(self.app)
    with transaction(context.sessions) as session:
        forget_old(session)
        return expire_due(session)

"""Sending work to the control worker: a job run or an agent turn. Every message carries an id
only. (A run goes to its queue through the broker's dispatcher, broker/dispatcher.py.)"""

from __future__ import annotations

import kombu.exceptions
import redis
import structlog
from celery import Celery

from broker import jobstate
from relay import naming
from relay.errors import BackendUnavailable
from store.db import SessionFactory, transaction

RUN_JOB_TASK = "skillfleet.run_job"
RUN_TURN_TASK = "skillfleet.run_turn"
JOB_UNREACHABLE = "The control queue (Redis) can't be reached, so the job run was not started."

log = structlog.get_logger(__name__)


def send_job_run(celery: Celery, job_run_id: str) -> None:
    """Send a job run's task to the control worker; the message carries the id only."""
    celery.send_task(RUN_JOB_TASK, args=[job_run_id], queue=naming.CONTROL)


def carry_on_job_run(celery: Celery, job_run_id: str) -> None:
    """Wake a job run whose call the owner just answered; the minute tick retries if Redis
    can't take the message now."""
    try:
        send_job_run(celery, job_run_id)
    except (redis.RedisError, kombu.exceptions.OperationalError) as e:
        log.warning("job run not woken", job_run_id=job_run_id, error_type=type(e).__name__)


def start_job_run(sessions: SessionFactory, celery: Celery, job_run_id: str) -> None:
    """Send a queued run; if Redis can't take it, the run fails instead of staying queued."""
    try:
        send_job_run(celery, job_run_id)
    except (redis.RedisError, kombu.exceptions.OperationalError) as e:
        with transaction(sessions) as session:
            jobstate.abandon(session, job_run_id, JOB_UNREACHABLE)
        raise BackendUnavailable(JOB_UNREACHABLE) from e


def send_turn(celery: Celery, turn_id: str) -> None:
    """Send a turn's task to the control worker; the message carries the id only."""
    celery.send_task(RUN_TURN_TASK, args=[turn_id], queue=naming.CONTROL)

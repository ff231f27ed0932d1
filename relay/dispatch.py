"""Sending work to the workers: a run's task to its queue (for the broker's dispatcher,
broker/dispatcher.py), a job run or an agent turn to the control worker. Every message carries
an id only."""

from __future__ import annotations

import uuid

import kombu.exceptions
import redis
import structlog
from celery import Celery

from relay import naming
from relay.errors import BackendUnavailable
from store.db import SessionFactory, transaction
from store.lifecycle import jobruns

RUN_JOB_TASK = "skillfleet.run_job"
RUN_TURN_TASK = "skillfleet.run_turn"
JOB_UNREACHABLE = "The control queue (Redis) can't be reached, so the job run was not started."

log = structlog.get_logger(__name__)


def send_run(celery: Celery, task: str, run_id: str, queue: str) -> None:
    """Queue `task` for the run on `queue`; the message carries the run's id only.

    Flower shows it as `run <id> on <queue>` (its shadow name), never the script's arguments.
    With task events on, the "task-sent" event names it so too and goes out before the message:
    Celery's own names the task and follows the message, so a fast worker's "task-received"
    could reach Flower first and the late "sent" event put the bare name back. Both are built
    and sent through Celery's public API (`app.amqp`, `app.events`). Redis errors are raised.
    """
    shadow = f"run {run_id} on {queue}"
    _send(celery, task, run_id, queue, shadow=shadow)


def send_job_run(celery: Celery, job_run_id: str) -> None:
    """Send a job run's task to the control worker; the message carries the id only."""
    _send(celery, RUN_JOB_TASK, job_run_id, naming.CONTROL)


def _send(celery: Celery, task: str, entity_id: str, queue: str, shadow: str | None = None) -> None:
    """The message of `task` for `entity_id` on `queue`, as `send_task` sends it, less what
    no one reads or needs at every send: a subscription to the task's result (its row and
    stream are its outcome), the arguments' safe repr (one id), and the queue's declaration
    (a message to the default exchange goes to its queue's list by name; a worker declares the
    queue it consumes): together about a fifth of a send's time."""
    task_id = str(uuid.uuid4())
    args = [entity_id]
    shown = repr(args)
    events = bool(celery.conf.task_send_sent_event)
    message = celery.amqp.create_task_message(
        task_id, task, args, {}, shadow=shadow, ignore_result=True, root_id=task_id,
        argsrepr=shown, kwargsrepr="{}", create_sent_event=events and shadow is None,
    )  # fmt: skip
    with celery.producer_or_acquire() as producer:
        if events and shadow is not None:
            sent = {
                "uuid": task_id, "root_id": task_id, "parent_id": None, "name": shadow,
                "args": shown, "kwargs": "{}", "retries": 0, "eta": None, "expires": None,
                "queue": queue, "exchange": "", "routing_key": queue,
            }  # fmt: skip
            celery.events.Dispatcher(enabled=False).publish("task-sent", sent, producer)
        celery.amqp.send_task_message(producer, task, message, queue=queue, declare=[])


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
            jobruns.abandon(session, job_run_id, JOB_UNREACHABLE)
        raise BackendUnavailable(JOB_UNREACHABLE) from e


def send_turn(celery: Celery, turn_id: str) -> None:
    """Send a turn's task to the control worker; the message carries the id only.

    Nobody reads a turn's task result (the turn's row and stream are its outcome): without
    `ignore_result` Celery subscribes to the result's channel at every send, a round trip that
    was half of `POST /api/chat`'s time before the answer's first text.
    """
    _send(celery, RUN_TURN_TASK, turn_id, naming.CONTROL)

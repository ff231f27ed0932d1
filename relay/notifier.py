"""Waking the control worker's notifier: a notice sends the notify task as it is published.

The task carries the owner's id and delivers that owner's new notices (workers/notify.py). A
burst of notices sends one task: the first sets `skillfleet:owner:<id>:notify` and pushes the
task's message (relay/taskmessage.py) to the control queue; the task deletes the key before it
reads the owner's feed, so a notice published after that sends the next one. The key expires
after DUE_SECONDS, so a message lost with Redis holds nothing back for longer; beat's sweep
delivers what a lost wake left behind.
"""

from __future__ import annotations

import redis
import structlog

from relay import naming
from relay.taskmessage import new_task_id, push, task_message

NOTIFY_TASK = "skillfleet.notify"
DUE_SECONDS = 60

log = structlog.get_logger(__name__)


def wake(client: redis.Redis, owner_id: int) -> None:
    """Send the owner's notify task unless one is on its way; Redis being away is only logged."""
    try:
        if not client.set(naming.notify_due(owner_id), "1", nx=True, ex=DUE_SECONDS):
            return
        args = [str(owner_id)]
        message = task_message(new_task_id(), NOTIFY_TASK, args, naming.CONTROL, NOTIFY_TASK)
        pipe = client.pipeline(transaction=False)
        push(pipe, naming.CONTROL, message)
        pipe.execute()
    except redis.RedisError as e:
        log.warning("notifier not woken", owner_id=owner_id, error=str(e))


def woken(client: redis.Redis, owner_id: int) -> None:
    """The owner's notify task is running: a notice published from now on sends another."""
    client.delete(naming.notify_due(owner_id))

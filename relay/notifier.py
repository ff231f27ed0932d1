"""Waking the control worker's notifier: a notice sends the notify task as it is published.

The task carries the owner's id and delivers that owner's new notices (workers/notify.py). A
burst of notices sends one task: the first sets `skillfleet:owner:<id>:notify` and sends the
task to the control queue of the Redis it was published to; the task deletes the key before it
reads the owner's feed, so a notice published after that sends the next one. The key expires
after DUE_SECONDS, so a message lost with Redis holds nothing back for longer; beat's sweep
delivers what a lost wake left behind.
"""

from __future__ import annotations

import threading
import weakref
from urllib.parse import quote

import kombu.exceptions
import redis
import structlog
from celery import Celery

from relay import naming
from relay.app import create_celery
from relay.connections import settings_of
from store.settings import Settings

NOTIFY_TASK = "skillfleet.notify"
DUE_SECONDS = 60

log = structlog.get_logger(__name__)
# The Celery app that sends the notify tasks of each Redis client: the process's own
# (relay/clients.py), or one made on first use for a client built without it.
_senders: weakref.WeakKeyDictionary[redis.Redis, Celery] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def wake(client: redis.Redis, owner_id: int) -> None:
    """Send the owner's notify task unless one is on its way; Redis being away is only logged."""
    try:
        if not client.set(naming.notify_due(owner_id), "1", nx=True, ex=DUE_SECONDS):
            return
        _sender(client).send_task(
            NOTIFY_TASK, args=[str(owner_id)], queue=naming.CONTROL, ignore_result=True
        )
    except (redis.RedisError, kombu.exceptions.OperationalError) as e:
        log.warning("notifier not woken", owner_id=owner_id, error=str(e))


def woken(client: redis.Redis, owner_id: int) -> None:
    """The owner's notify task is running: a notice published from now on sends another."""
    client.delete(naming.notify_due(owner_id))


def send_through(client: redis.Redis, celery: Celery) -> None:
    """Notices published through `client` send their task with `celery`."""
    with _lock:
        _senders[client] = celery


def _sender(client: redis.Redis) -> Celery:
    with _lock:
        found = _senders.get(client)
        if found is None:
            settings = settings_of(client) or Settings(redis_url=redis_url(client))
            found = _senders[client] = create_celery(settings, current=False)
        return found


def redis_url(client: redis.Redis) -> str:
    """The URL of the server and database `client` talks to."""
    kwargs = client.connection_pool.connection_kwargs
    db = int(kwargs.get("db") or 0)
    user, password = kwargs.get("username"), kwargs.get("password")
    auth = ""
    if password:
        auth = f"{quote(user or '', safe='')}:{quote(password, safe='')}@"
    if "path" in kwargs:
        return f"unix://{auth}{kwargs['path']}" + (f"?db={db}" if db else "")
    scheme = (
        "rediss"
        if issubclass(client.connection_pool.connection_class, redis.SSLConnection)
        else "redis"
    )
    return f"{scheme}://{auth}{kwargs.get('host', '127.0.0.1')}:{kwargs.get('port', 6379)}/{db}"

"""A run's Celery task message, built here so that it travels in a pipeline of ours.

Celery's `send_task` routes, builds and publishes a message in about 0.4 ms of Python and a
Redis round trip of its own, for every run. A run's message always has one shape: one task,
one argument (the run id), a named queue, no result. So it is built here in Celery's task
protocol 2 ("Message Protocol" in Celery's documentation), inside the envelope kombu's Redis
transport keeps in a queue's list (JSON, the body base64), and the caller pushes it with
`push` in the round trip that also announces the run. tests/relay/test_taskmessage.py holds it
against what `send_task` builds, so a Celery or kombu release that changes either shows there.

With task events on, the run's "task-sent" event for Flower is built here too, and published in
the same round trip just before the message is pushed. Celery's own event names the task, not
its shadow, and goes out after the message: a fast worker's "task-received" could reach Flower
first, and the late "sent" event then put the bare task name back over the shadow (events
older than the task's state still overwrite its name there).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from typing import Any

from celery.events.event import Event
from celery.utils.time import utcoffset

# What protocol 2 embeds after the arguments: no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_origin: tuple[int, str] | None = None
SENT_ROUTING_KEY = "task.sent"


def new_task_id() -> str:
    return str(uuid.uuid4())


def task_message(task_id: str, task: str, args: list[str], queue: str, shadow: str) -> bytes:
    """The message that asks a worker of `queue` to run `task(*args)`."""
    body = json.dumps([args, {}, _EMBED]).encode()
    headers: dict[str, Any] = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "shadow": shadow,
        "eta": None,
        "expires": None,
        "group": None,
        "group_index": None,
        "retries": 0,
        "timelimit": [None, None],
        "root_id": task_id,
        "parent_id": None,
        "argsrepr": repr(args),
        "kwargsrepr": "{}",
        "origin": _origin_name(),
        "ignore_result": True,
        "replaced_task_nesting": 0,
        "stamped_headers": None,
        "stamps": {},
    }
    properties: dict[str, Any] = {
        "correlation_id": task_id,
        "reply_to": None,  # no result and no reply: nothing listens for one
        "delivery_mode": 2,
        "delivery_info": {"exchange": "", "routing_key": queue},
        "priority": 0,
        "body_encoding": "base64",
        "delivery_tag": str(uuid.uuid4()),
    }
    return _envelope(body, headers, properties)


def sent_event(
    exchange: str, clock: int, task_id: str, shadow: str, args: list[str], queue: str
) -> bytes:
    """The "task-sent" event Celery's send_task publishes, naming the task by its shadow."""
    origin = _origin_name()
    event = Event(
        "task-sent",
        hostname=origin,
        utcoffset=utcoffset(),
        pid=os.getpid(),
        clock=clock,
        uuid=task_id,
        root_id=task_id,
        parent_id=None,
        name=shadow,
        args=repr(args),
        kwargs="{}",
        retries=0,
        eta=None,
        expires=None,
        queue=queue,
        exchange="",
        routing_key=queue,
    )
    properties: dict[str, Any] = {
        "delivery_mode": 1,  # transient, as Celery sends events
        "priority": 0,
        "delivery_info": {"exchange": exchange, "routing_key": SENT_ROUTING_KEY},
        "body_encoding": "base64",
        "delivery_tag": str(uuid.uuid4()),
    }
    return _envelope(json.dumps(event).encode(), {"hostname": origin}, properties)


def sent_event_channel(db: int, exchange: str) -> str:
    """The pub/sub channel kombu's Redis transport publishes a "task-sent" event on."""
    return f"/{db}.{exchange}/{SENT_ROUTING_KEY}"


def _envelope(body: bytes, headers: dict[str, Any], properties: dict[str, Any]) -> bytes:
    envelope = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": properties,
    }
    return json.dumps(envelope).encode()


def push(pipe: Any, queue: str, message: bytes) -> None:
    """Queue the message on `pipe`: the list a worker of `queue` pops (priority 0 has no
    suffix in kombu's Redis transport)."""
    pipe.lpush(queue, message)


def _origin_name() -> str:
    """Celery's name for a sending process that is not a worker: gen<pid>@<host>."""
    global _origin
    pid = os.getpid()
    if _origin is None or _origin[0] != pid:  # per process: gunicorn forks its workers
        _origin = (pid, f"gen{pid}@{socket.gethostname()}")
    return _origin[1]

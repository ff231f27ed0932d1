"""A run's Celery task message, built here so that it travels in a pipeline of ours.

Celery's `send_task` routes, builds and publishes a message in about 0.4 ms of Python and a
Redis round trip of its own, for every run. A run's message always has one shape: one task,
one argument (the run id), a named queue, no result. So it is built here in Celery's task
protocol 2 ("Message Protocol" in Celery's documentation), inside the envelope kombu's Redis
transport keeps in a queue's list (JSON, the body base64), and the caller pushes it with
`push` in the round trip that also announces the run. tests/relay/test_taskmessage.py holds it
against what `send_task` builds, so a Celery or kombu release that changes either shows there.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from typing import Any

# What protocol 2 embeds after the arguments: no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
_origin: tuple[int, str] | None = None


def task_message(task: str, args: list[str], queue: str, shadow: str) -> bytes:
    """The message that asks a worker of `queue` to run `task(*args)`."""
    task_id = str(uuid.uuid4())
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

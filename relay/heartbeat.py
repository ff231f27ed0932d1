"""Worker heartbeats in Redis: who serves which queue, and is it still alive.

A beat records until when its worker counts as alive (the beat's time plus the worker's alive
window, `SKILLFLEET_WORKER_ALIVE_SECONDS`): the sets of workers are scored by that deadline, so
whoever reads them needs no setting of the worker's, only the clock.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from relay import naming
from relay.connections import reply_text
from store.settings import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_WORKER_ALIVE_SECONDS

# A worker killed without a word stays in the sets of workers this long, then a beat drops it.
FORGET_SECONDS = 3600.0


@dataclass
class Instance:
    """One worker process: a node name (or role), this host, pid and start time."""

    role: str
    queue: str
    name: str | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    started: float = field(default_factory=time.time)
    features: list[str] = field(default_factory=list)
    hashes: dict[str, list[str]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    reason: str | None = None

    @property
    def id(self) -> str:
        label = self.name or self.role
        return f"{label}@{self.host}:{self.pid}:{int(self.started * 1000)}"


def beat(
    client: redis.Redis,
    instance: Instance,
    serving: bool = True,
    alive_seconds: float = DEFAULT_WORKER_ALIVE_SECONDS,
) -> None:
    """Record one heartbeat, good for `alive_seconds`; `serving` False records the worker
    without offering its queue."""
    now = time.time()
    until = now + alive_seconds
    details: dict[Any, Any] = {
        "role": instance.role,
        "queue": instance.queue,
        "name": instance.name or "",
        "host": instance.host,
        "pid": instance.pid,
        "started": instance.started,
        "beat": now,
        "until": until,
        "serving": int(serving),
        "features": json.dumps(instance.features),
        "hashes": json.dumps(instance.hashes),
        "refused": json.dumps(instance.refused),
        "reason": instance.reason or "",
    }
    pipe = client.pipeline()
    pipe.hset(naming.worker_key(instance.id), mapping=details)
    pipe.expire(naming.worker_key(instance.id), math.ceil(alive_seconds * 3))
    pipe.zadd(naming.all_workers(), {instance.id: until})
    pipe.zremrangebyscore(naming.all_workers(), "-inf", now - FORGET_SECONDS)
    if serving:
        pipe.zadd(naming.queue_workers(instance.queue), {instance.id: until})
        pipe.zremrangebyscore(naming.queue_workers(instance.queue), "-inf", now - FORGET_SECONDS)
    pipe.execute()


def stop(client: redis.Redis, instance: Instance) -> None:
    pipe = client.pipeline()
    pipe.zrem(naming.queue_workers(instance.queue), instance.id)
    pipe.zrem(naming.all_workers(), instance.id)
    pipe.delete(naming.worker_key(instance.id))
    pipe.execute()


def is_alive(client: redis.Redis, instance_id: str) -> bool:
    until = client.zscore(naming.all_workers(), instance_id)
    return until is not None and until >= time.time()


def live_workers(client: redis.Redis, queue: str) -> list[str]:
    """Instances whose last beat for `queue` still counts them alive."""
    members = client.zrangebyscore(naming.queue_workers(queue), time.time(), "+inf")
    return [reply_text(m) for m in members]


def workers(client: redis.Redis) -> list[dict[str, Any]]:
    """Every worker alive within the last minute, with its details, newest beat first."""
    since = time.time() - 60
    found = []
    for member in client.zrevrangebyscore(naming.all_workers(), "+inf", since):
        instance_id = reply_text(member)
        raw = client.hgetall(naming.worker_key(instance_id))
        if not raw:
            continue
        details: dict[str, Any] = {reply_text(k): reply_text(v) for k, v in raw.items()}
        details["id"] = instance_id
        details["features"] = json.loads(details.get("features") or "[]")
        details["hashes"] = json.loads(details.get("hashes") or "{}")
        details["refused"] = json.loads(details.get("refused") or "[]")
        details["alive"] = float(details.get("until") or 0) >= time.time()
        found.append(details)
    return found


class Beater:
    """Beats in a background thread until stopped."""

    def __init__(
        self,
        client: redis.Redis,
        instance: Instance,
        serving: bool = True,
        refresh: Callable[[Instance], None] | None = None,
        every: float = DEFAULT_HEARTBEAT_SECONDS,
        alive_seconds: float = DEFAULT_WORKER_ALIVE_SECONDS,
    ) -> None:
        self.client = client
        self.instance = instance
        self.serving = serving
        self.refresh = refresh
        self.every = every
        self.alive_seconds = alive_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def start(self) -> None:
        beat(self.client, self.instance, self.serving, self.alive_seconds)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                if self.refresh is not None:
                    self.refresh(self.instance)
                beat(self.client, self.instance, self.serving, self.alive_seconds)
            except redis.RedisError:
                continue  # Redis is away; the next beat tries again

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # a worker stopped before it was ready never beat
            self._thread.join(timeout=5)
        try:
            stop(self.client, self.instance)
        except redis.RedisError:
            pass

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
    def label(self) -> str:
        """The node's name, or the worker's role: what /metrics names it by."""
        return self.name or self.role

    @property
    def id(self) -> str:
        return f"{self.label}@{self.host}:{self.pid}:{int(self.started * 1000)}"


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
    pipe.zadd(naming.beating_names(), {instance.label: until})
    pipe.zremrangebyscore(naming.beating_names(), "-inf", now - FORGET_SECONDS)
    if instance.name:
        pipe.zadd(naming.named_workers(instance.name), {instance.id: until})
        pipe.zremrangebyscore(naming.named_workers(instance.name), "-inf", now - FORGET_SECONDS)
    if serving:
        pipe.zadd(naming.queue_workers(instance.queue), {instance.id: until})
        pipe.zremrangebyscore(naming.queue_workers(instance.queue), "-inf", now - FORGET_SECONDS)
    pipe.execute()


def stop(client: redis.Redis, instance: Instance) -> None:
    """Forget a worker that stops: its queue is no longer served."""
    pipe = client.pipeline()
    pipe.zrem(naming.queue_workers(instance.queue), instance.id)
    pipe.zrem(naming.all_workers(), instance.id)
    if instance.name:
        pipe.zrem(naming.named_workers(instance.name), instance.id)
    pipe.delete(naming.worker_key(instance.id))
    pipe.execute()
    # The name stays while another of its workers beats; its last worker's stop forgets it.
    others = (
        naming.named_workers(instance.name)
        if instance.name
        else naming.queue_workers(instance.queue)
    )
    if not client.zcount(others, time.time(), "+inf"):
        client.zrem(naming.beating_names(), instance.label)


def is_alive(client: redis.Redis, instance_id: str) -> bool:
    until = client.zscore(naming.all_workers(), instance_id)
    return until is not None and until >= time.time()


def lost_among(client: redis.Redis, instance_ids: list[str]) -> set[str]:
    """Those of `instance_ids` whose last beat no longer counts them alive, in one round trip
    however many there are (the reaper asks of every running run's worker each round)."""
    wanted = sorted(set(instance_ids))
    if not wanted:
        return set()
    pipe = client.pipeline(transaction=False)
    for instance_id in wanted:
        pipe.zscore(naming.all_workers(), instance_id)
    now = time.time()
    return {
        instance_id
        for instance_id, until in zip(wanted, pipe.execute(), strict=True)
        if until is None or until < now
    }


@dataclass(frozen=True)
class FleetHealth:
    """How many node names and worker roles beat in time (`alive`) and how many stopped within
    the last FORGET_SECONDS (`overdue`), and the `worst` few: each label with the deadline of
    its newest beat, the earliest deadline first."""

    alive: int
    overdue: int
    worst: list[tuple[str, float]]


def fleet_health(client: redis.Redis, worst: int) -> FleetHealth:
    """The fleet's health from the names' newest beats (`naming.beating_names`), in one round
    trip that reads `worst` names however large the fleet."""
    now = time.time()
    key = naming.beating_names()
    pipe = client.pipeline(transaction=False)
    pipe.zcount(key, now, "+inf")
    pipe.zcount(key, now - FORGET_SECONDS, f"({now}")
    pipe.zrangebyscore(key, now - FORGET_SECONDS, "+inf", start=0, num=worst, withscores=True)
    alive, overdue, found = pipe.execute()
    return FleetHealth(
        int(alive), int(overdue), [(reply_text(label), float(until)) for label, until in found]
    )


def live_workers(client: redis.Redis, queue: str) -> list[str]:
    """Instances whose last beat for `queue` still counts them alive."""
    members = client.zrangebyscore(naming.queue_workers(queue), time.time(), "+inf")
    return [reply_text(m) for m in members]


def served_queues(client: redis.Redis, queues: list[str]) -> set[str]:
    """Those of `queues` a live worker serves, in one round trip."""
    if not queues:
        return set()
    pipe = client.pipeline(transaction=False)
    now = time.time()
    for queue in queues:
        pipe.zcount(naming.queue_workers(queue), now, "+inf")
    return {queue for queue, count in zip(queues, pipe.execute(), strict=True) if count}


def live_features(client: redis.Redis, queue: str) -> set[str]:
    """The features the live workers of `queue` advertise, in two round trips."""
    ids = live_workers(client, queue)
    if not ids:
        return set()
    pipe = client.pipeline(transaction=False)
    for instance_id in ids:
        pipe.hget(naming.worker_key(instance_id), "features")
    return {feature for raw in pipe.execute() if raw for feature in json.loads(reply_text(raw))}


def workers(client: redis.Redis) -> list[dict[str, Any]]:
    """Every worker alive within the last minute, with its details, newest beat first."""
    members = client.zrevrangebyscore(naming.all_workers(), "+inf", time.time() - 60)
    return _details(client, [reply_text(member) for member in members])


def workers_named(client: redis.Redis, names: list[str]) -> list[dict[str, Any]]:
    """The workers alive within the last minute that beat under one of `names` (nodes' or
    runners'), with their details, in two round trips however large the fleet."""
    since = time.time() - 60
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.zrevrangebyscore(naming.named_workers(name), "+inf", since)
    ids = [reply_text(member) for members in pipe.execute() for member in members]
    return _details(client, ids)


def _details(client: redis.Redis, ids: list[str]) -> list[dict[str, Any]]:
    """The heartbeats of `ids` still held, parsed, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for instance_id in ids:
        pipe.hgetall(naming.worker_key(instance_id))
    found = []
    now = time.time()
    for instance_id, raw in zip(ids, pipe.execute() if ids else [], strict=True):
        if not raw:
            continue
        details: dict[str, Any] = {reply_text(k): reply_text(v) for k, v in raw.items()}
        details["id"] = instance_id
        details["features"] = json.loads(details.get("features") or "[]")
        details["hashes"] = json.loads(details.get("hashes") or "{}")
        details["refused"] = json.loads(details.get("refused") or "[]")
        details["alive"] = float(details.get("until") or 0) >= now
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
        if self.refresh is not None:  # the first beat says what the later ones would
            self.refresh(self.instance)
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

"""The fleet as owners and agents see it: each node, what it serves and how healthy it is.

A node is registered (`skillfleet nodes add`), heard from (its workers' heartbeats), or both.
Its health comes from its workers' last beats against their alive window, which each beat
records (relay/heartbeat.py): `alive` while one still counts, `stale` once every beat heard in
the last minute ran past it, `down` when none was heard. Node tokens never appear here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import redis
from sqlalchemy import select

from relay import heartbeat, naming
from store.db import SessionFactory
from store.models import Node

ALIVE = "alive"
STALE = "stale"
DOWN = "down"


def node_views(sessions: SessionFactory, client: redis.Redis) -> list[dict[str, Any]]:
    """Registered nodes and nodes with workers heard from, by name."""
    with sessions() as session:
        registered = list(session.scalars(select(Node.name).order_by(Node.name)))
    by_node: dict[str, list[dict[str, Any]]] = {name: [] for name in registered}
    for worker in heartbeat.workers(client):
        if worker.get("name"):
            by_node.setdefault(worker["name"], []).append(worker)
    return [node_view(name, name in registered, by_node[name]) for name in sorted(by_node)]


def node_view(name: str, registered: bool, workers: list[dict[str, Any]]) -> dict[str, Any]:
    """One node: its workers, the features and queues they offer, hashes held, health."""
    features = sorted({feature for worker in workers for feature in worker["features"]})
    hashes: dict[str, set[str]] = {}
    for worker in workers:
        for skill, held in worker["hashes"].items():
            hashes.setdefault(skill, set()).update(held)
    beats = [float(worker["beat"]) for worker in workers]
    alive = any(worker["alive"] for worker in workers)
    return {
        "name": name,
        "registered": registered,
        "alive": alive,
        "health": ALIVE if alive else (STALE if workers else DOWN),
        "queues": sorted({worker["queue"] for worker in workers if worker["serving"] == "1"}),
        "workers": [_worker_view(worker) for worker in workers],
        "features": features,
        "hashes": {skill: sorted(held) for skill, held in sorted(hashes.items())},
        "last_heartbeat": iso(max(beats)) if beats else None,
    }


def _worker_view(worker: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": worker["id"],
        "role": worker["role"],
        "queue": worker["queue"],
        "host": worker["host"],
        "serving": worker["serving"] == "1",
        "alive": worker["alive"],
        "last_heartbeat": iso(float(worker["beat"])),
        "features": worker["features"],
        "reason": worker["reason"] or None,
    }


def iso(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat()


def node_is_live(client: redis.Redis, node: str) -> bool:
    """A live worker beats for the node's queue: a run sent there now is picked up."""
    return bool(heartbeat.live_workers(client, naming.node_queue(node)))


def is_registered(sessions: SessionFactory, node: str) -> bool:
    with sessions() as session:
        return session.get(Node, node) is not None

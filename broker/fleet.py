"""The fleet as owners and agents see it: each node, what it serves and how healthy it is.

An owner sees the nodes offered to it (`skillfleet nodes add NAME --owner O`, `nodes share`;
store/nodes.py) and the runners every owner shares (the Spark, the sandbox); a node heard from
but offered to no one is no one's to see or use. A node's health comes from its workers' last
beats against their alive window, which each beat records (relay/heartbeat.py): `alive` while
one that serves its queue still counts, `not_serving` while workers beat but none serves (each
says why, as a sandbox worker on a host whose KVM can't start a micro-VM does), `stale` once
every beat heard in the last minute ran past it, `down` when none was heard. Node tokens never
appear here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from sqlalchemy import select

from broker.errors import NodeNotFound, NodeShared
from relay import heartbeat, naming
from relay.errors import BackendUnavailable
from store import nodes
from store.db import SessionFactory, core_connection
from store.limits import MAX_NODES_CHECKED, MAX_NODES_NAMED
from store.models import Node
from store.names import RUNNERS

ALIVE = "alive"
NOT_SERVING = "not_serving"
STALE = "stale"
DOWN = "down"
# How a node's workers run scripts, by the feature their heartbeats carry (workers/runners/
# isolation.py): a uid of each run's own, or the worker's user.
RUNS_AS = {"run-uids": "uid", "worker-user": "worker"}
# Nodes a refusal's hint checks for a live worker at a time: one batch usually names enough.
LIVE_BATCH = 2 * MAX_NODES_NAMED


@dataclass(frozen=True)
class NodePage:
    """One page of the fleet by name: the nodes' views, how many there are in all (the
    owner's nodes and the runners heard from), and whether more follow the last."""

    views: list[dict[str, Any]]
    total: int
    more: bool


def node_page(
    sessions: SessionFactory,
    client: redis.Redis,
    owner_id: int,
    after: str | None = None,
    size: int | None = None,
) -> NodePage:
    """The nodes offered to `owner_id` and the shared runners heard from, by name after
    `after`, at most `size` of them (None: every one). Only the page's own rows and
    heartbeats are read: another owner's fleet, or another page, costs nothing."""
    runners: dict[str, list[dict[str, Any]]] = {}
    for worker in heartbeat.workers_named(client, list(RUNNERS)):
        runners.setdefault(worker["name"], []).append(worker)
    with sessions() as session:
        # One more than the page, so that whether more follow is known without a count.
        mine = nodes.owned_page(session, owner_id, after, size + 1 if size else 1 << 31)
        total = (len(mine) if size is None else nodes.owned_count(session, owner_id)) + len(runners)
        names = sorted({*mine, *(name for name in runners if after is None or name > after)})
        chosen = names if size is None else names[:size]
        registered = set(
            session.scalars(select(Node.name).where(Node.name.in_([*chosen, *RUNNERS])))
        )
    by_node: dict[str, list[dict[str, Any]]] = {
        name: list(runners.get(name, [])) for name in chosen
    }
    for worker in heartbeat.workers_named(client, [name for name in chosen if name in mine]):
        by_node[worker["name"]].append(worker)
    views = [
        node_view(name, name in registered, by_node[name], shared=mine.get(name, 0) > 1)
        for name in chosen
    ]
    return NodePage(views, total, len(names) > len(chosen))


def usable_node(
    sessions: SessionFactory, client: redis.Redis | None, owner_id: int, node: str
) -> None:
    """Raise unless `node` is offered to `owner_id` and may run its scripts now: a shared node
    must give each run a uid of its own. A node of others is as unknown as one never named."""
    with core_connection(sessions) as connection:
        owners = nodes.owners_of(connection, node)
    if owner_id not in owners:
        hint = nodes_hint(sessions, client, owner_id)
        raise NodeNotFound(f"HOST: there is no node named {_quoted(node)}; {hint}.")
    if len(owners) > 1 and client is not None and "worker" in runs_as(client, node):
        raise NodeShared(
            f"HOST: the node '{node}' is shared by several owners but runs scripts as its "
            "worker's user, so nothing of yours runs there; its operator must give each run "
            "a uid of its own (SKILLFLEET_NODE_RUN_AS=uid) or keep the node to one owner."
        )


@dataclass(frozen=True)
class LiveNodes:
    """What a refusal says of the owner's nodes: the live ones among those checked, the first
    `checked` by name (the rest were not looked at), the first names of all, and how many
    there are."""

    live: list[str]
    first: list[str]
    total: int
    checked: int


def live_nodes(sessions: SessionFactory, client: redis.Redis | None, owner_id: int) -> LiveNodes:
    """The nodes offered to `owner_id` that a live worker serves, by name: checked a batch of
    LIVE_BATCH at a time (a query and one round trip of Redis each) until MAX_NODES_NAMED are
    found or MAX_NODES_CHECKED were looked at; without Redis every one counts as live (nothing
    tells otherwise)."""
    live: list[str] = []
    checked: list[str] = []
    while len(live) < MAX_NODES_NAMED and len(checked) < MAX_NODES_CHECKED:
        after = checked[-1] if checked else None
        with sessions() as session:
            batch = list(nodes.owned_page(session, owner_id, after, LIVE_BATCH))
        checked += batch
        if client is None:
            live += batch
        else:
            try:
                queues = [naming.node_queue(name) for name in batch]
                served = heartbeat.served_queues(client, queues)
            except redis.RedisError:
                served = set(queues)
            live += [name for name in batch if naming.node_queue(name) in served]
        if len(batch) < LIVE_BATCH:
            return LiveNodes(live, checked[:MAX_NODES_NAMED], len(checked), len(checked))
    with sessions() as session:
        total = nodes.owned_count(session, owner_id)
    return LiveNodes(live, checked[:MAX_NODES_NAMED], total, len(checked))


def nodes_hint(sessions: SessionFactory, client: redis.Redis | None, owner_id: int) -> str:
    """What a refusal says of the nodes the caller's owner may run on: the live ones by name,
    else why there is none. Never another owner's node, nor a name no one registered."""
    return describe_nodes(live_nodes(sessions, client, owner_id))


def describe_nodes(found: LiveNodes) -> str:
    """`your nodes: a, b` for the live ones; else why there is none to name."""
    checked_all = found.checked == found.total
    if found.live:
        named = _listed(found.live[:MAX_NODES_NAMED], len(found.live))
        if checked_all:
            return f"your nodes: {named}"
        return (
            f"your nodes: {named} (of the first {found.checked} of your {found.total}; "
            "list_nodes shows them all)"
        )
    if found.first:
        which = (
            "none of your nodes"
            if checked_all
            else f"none of the first {found.checked} of your {found.total} nodes"
        )
        listed = _listed(found.first, found.total)
        return f"{which} is running now ({listed}; list_nodes shows them)"
    return "you have no nodes (an operator adds one with `skillfleet nodes add NAME --owner YOU`)"


def _listed(names: list[str], total: int) -> str:
    more = total - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _quoted(node: str) -> str:
    """A node name as a refusal quotes it: cut to a name's length, control characters escaped."""
    return repr(node[:64])


def runs_as(client: redis.Redis, node: str) -> set[str]:
    """How the node's live workers run scripts ("uid", "worker")."""
    try:
        features = heartbeat.live_features(client, naming.node_queue(node))
    except redis.RedisError as e:
        raise BackendUnavailable("Redis can't be reached to see how the node runs.") from e
    return {RUNS_AS[feature] for feature in features if feature in RUNS_AS}


def node_view(
    name: str, registered: bool, workers: list[dict[str, Any]], shared: bool = False
) -> dict[str, Any]:
    """One node: its workers, the features and queues they offer, hashes held, health."""
    features = sorted({feature for worker in workers for feature in worker["features"]})
    hashes: dict[str, set[str]] = {}
    for worker in workers:
        for skill, held in worker["hashes"].items():
            hashes.setdefault(skill, set()).update(held)
    beats = [float(worker["beat"]) for worker in workers]
    beating = any(worker["alive"] for worker in workers)
    # A worker that beats but serves nothing takes no run: the node is not alive for a caller.
    alive = any(worker["alive"] and worker["serving"] == "1" for worker in workers)
    return {
        "name": name,
        "registered": registered,
        "alive": alive,
        "health": _health(alive, beating, bool(workers)),
        "queues": sorted({worker["queue"] for worker in workers if worker["serving"] == "1"}),
        "workers": [_worker_view(worker) for worker in workers],
        "features": features,
        "hashes": {skill: sorted(held) for skill, held in sorted(hashes.items())},
        "last_heartbeat": iso(max(beats)) if beats else None,
        "shared": shared,
        "runs_as": next((RUNS_AS[f] for f in features if f in RUNS_AS), None),
    }


def _health(alive: bool, beating: bool, heard: bool) -> str:
    if alive:
        return ALIVE
    if beating:
        return NOT_SERVING
    return STALE if heard else DOWN


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

"""A fleet at scale: the routes and the per-call fleet work that read nodes, with 1,000 nodes
registered against 10. Prints figures; asserts nothing.

    python -m bench.fleet_scale [--nodes 1000] [--small 10] [--repeat 41]

Two systems side by side in this process, each its own SQLite database (migrated to head) and
its own Redis database (`REDIS_URL`'s and the one below it, both emptied first): one owner with
10 nodes, the other with `--nodes`, every node with a node worker's heartbeat as a live worker
writes it. Timed on each, the requests taking turns so that a busy moment of the machine falls
on both alike (the Flask app in this process, the owner's token, no HTTP server):

- `GET /api/nodes` (every page), the `list_nodes` tool and `GET /metrics` (whose fleet series
  come from the heartbeats);
- the first page of 25 nodes, and every page;
- the fleet work of each `run_skill_script` that names a node: whether the node is the
  owner's and may run its scripts (`broker.fleet.usable_node`); and, when it is not, which of
  the owner's nodes a live worker serves (`broker.fleet.live_nodes`, the refusal's hint);
- dispatch: a whole `run_skill_script` call to `node-000` answered `running` (`?wait=0`): the
  policy, the node check, the dispatcher's live check, the call's and run's rows and the
  message sent to the node's queue (no worker takes it; both sides' queues fill alike);
- beat: one housekeeping round as the control worker runs it every 5 s
  (`workers.housekeeping.housekeep`), with RUNNING runs running on live workers of the fleet
  on each side (the reaper asks after their workers).

Also printed: Redis memory per idle node (`used_memory` before and after the heartbeats), and
the ratio of each median to the 10-node side's (the goal: at most 1.2x).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from api import create_app  # noqa: E402
from api.services import Services  # noqa: E402
from bench.runs import skill_zip  # noqa: E402
from bench.scale import register_nodes  # noqa: E402
from broker import fleet  # noqa: E402
from relay import heartbeat  # noqa: E402
from relay.retention import DEFAULT_CAPS  # noqa: E402
from store.db import make_engine, transaction  # noqa: E402
from store.migrate import upgrade  # noqa: E402
from store.settings import Settings  # noqa: E402
from store.tokens import create_owner_token  # noqa: E402
from workers.housekeeping import housekeep  # noqa: E402

GOAL = 1.2
SMALL = 10
RUNNING = 10  # runs running on each side while beat's round is timed


@dataclass
class System:
    nodes: int
    client: Any  # the Flask test client
    auth: dict[str, str]
    services: Services
    owner_id: int
    memory_per_node: float


def build(folder: Path, redis_url: str, nodes: int) -> System:
    database = f"sqlite:///{folder / 'skillfleet.db'}"
    upgrade(database)
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    settings = replace(
        Settings.from_env(), data_dir=folder, database_url=database, redis_url=redis_url,
        metrics_public=True,
    )  # fmt: skip
    services = Services.build(settings, make_engine(database))
    with transaction(services.sessions) as session:
        token = create_owner_token(session, f"owner-{nodes}")
    with services.sessions() as session:
        from store.models import Owner

        owner_id = session.query(Owner.id).filter(Owner.name == f"owner-{nodes}").scalar()
    before = int(client.info("memory")["used_memory"])
    register_nodes(services.engine, owner_id, nodes, client)
    after = int(client.info("memory")["used_memory"])
    app = create_app(services=services)
    test_client = app.test_client()
    files = {"file": (io.BytesIO(skill_zip("noop", "node", {"scripts/ok.py": "pass\n"})), "s.zip")}
    imported = test_client.post(
        "/api/skills", data=files, headers={"Authorization": f"Bearer {token}"}
    )
    assert imported.status_code == 201, imported.get_data(as_text=True)
    running(services, owner_id, client)
    return System(
        nodes, test_client, {"Authorization": f"Bearer {token}"}, services, owner_id,
        (after - before) / nodes,
    )  # fmt: skip


def running(services: Services, owner_id: int, client: redis.Redis) -> None:
    """RUNNING runs, each on a live worker of one of the first nodes."""
    from store.models import Run, utcnow

    workers = heartbeat.workers_named(client, [f"node-{n:03d}" for n in range(RUNNING)])
    with transaction(services.sessions) as session:
        for worker in workers:
            session.add(
                Run(
                    id=str(uuid.uuid4()), owner_id=owner_id, skill_name="noop",
                    skill_hash="0" * 64, script="scripts/ok.py", arguments={},
                    execution="node", queue=worker["queue"], node=worker["name"],
                    status="running", timeout_seconds=300, started_at=utcnow(),
                    worker=worker["id"],
                )
            )  # fmt: skip


def measures(system: System) -> dict[str, Callable[[], None]]:
    def get(path: str) -> Callable[[], None]:
        def call() -> None:
            address: str | None = path
            while address:
                answer = system.client.get(address, headers=system.auth)
                assert answer.status_code == 200, answer.get_data(as_text=True)
                link = answer.headers.get("Link", "")
                address = link[1 : link.index(">")] if link else None

        return call

    def get_first(path: str) -> Callable[[], None]:
        def call() -> None:
            answer = system.client.get(path, headers=system.auth)
            assert answer.status_code == 200, answer.get_data(as_text=True)

        return call

    def list_nodes() -> None:
        answer = system.client.post(
            "/api/tools/list_nodes", json={"arguments": {}}, headers=system.auth
        )
        assert answer.status_code == 200, answer.get_data(as_text=True)

    def usable() -> None:
        services = system.services
        fleet.usable_node(services.sessions, services.redis, system.owner_id, "node-000")

    def hint() -> None:
        fleet.live_nodes(system.services.sessions, system.services.redis, system.owner_id)

    def dispatch() -> None:
        body = {
            "arguments": {"skill_name": "noop", "script": "scripts/ok.py",
                          "arguments": {"node": "node-000"}},
            "chat_id": "fleet-scale",
        }  # fmt: skip
        answer = system.client.post("/api/tools/run_skill_script", json=body, headers=system.auth)
        assert answer.json.get("status") == "running", answer.get_data(as_text=True)

    def beat() -> None:
        services = system.services
        housekeep(services.sessions, services.redis, DEFAULT_CAPS)

    return {
        "GET /api/nodes?page_size=25 (the first page)": get_first("/api/nodes?page_size=25"),
        "GET /api/nodes (every page)": get("/api/nodes"),
        "list_nodes": list_nodes,
        "GET /metrics": get("/metrics"),
        "a run's node check (usable_node)": usable,
        "a refusal's hint of live nodes (live_nodes)": hint,
        "dispatch: run_skill_script on a node, answered running": dispatch,
        f"beat: a housekeeping round, {RUNNING} runs running": beat,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_scale", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000, help="the larger fleet's nodes")
    parser.add_argument("--small", type=int, default=SMALL, help="the smaller fleet's nodes")
    parser.add_argument("--repeat", type=int, default=41, help="timings of each, per side")
    args = parser.parse_args(argv)
    base = Settings.from_env().redis
    prefix, _, db = base.rpartition("/")
    urls = [f"{prefix}/{int(db or 0)}", f"{prefix}/{(int(db or 0) - 1) % 16}"]
    with tempfile.TemporaryDirectory() as small_dir, tempfile.TemporaryDirectory() as big_dir:
        systems = [
            build(Path(small_dir), urls[0], args.small),
            build(Path(big_dir), urls[1], args.nodes),
        ]
        print(
            f"{args.small} nodes vs {args.nodes} nodes (SQLite, Redis); "
            f"median of {args.repeat} each, taking turns"
        )
        for system in systems:
            print(f"  Redis memory per idle node ({system.nodes}): {system.memory_per_node:.0f} B")
        timed = [measures(system) for system in systems]
        for label in timed[0]:
            timings: list[list[float]] = [[], []]
            for turn in range(args.repeat + 1):
                for index, one in enumerate(timed):
                    began = time.perf_counter()
                    one[label]()
                    if turn:  # the first warms the caches
                        timings[index].append((time.perf_counter() - began) * 1000)
            small, big = (statistics.median(found) for found in timings)
            print(
                f"  {small:8.2f} ms  {big:8.2f} ms  {big / small:5.2f}x  {label}"
                f"  (goal <= {GOAL}x)",
                flush=True,
            )
        for system in systems:
            redis.Redis.from_url(system.services.settings.redis).flushdb()


if __name__ == "__main__":
    main()

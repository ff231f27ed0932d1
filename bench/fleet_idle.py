"""What idle node workers cost the API: its CPU a second with none up, then with N up.
Prints figures; asserts nothing.

    python -m bench.fleet_idle [--nodes 110] [--processes 5] [--seconds 120]

It starts a real `skillfleet api` (gunicorn, 2 workers, its request log on) on a temporary
SQLite data dir and the Redis at `REDIS_URL` (redis://127.0.0.1:6379/8 unless set; emptied
first), installs one node skill, registers `--nodes` nodes for one owner (each with a node token
of its own) and times the API's CPU for `--seconds` with no node up: the baseline, measured in
the same run. Then it starts the nodes as `bench/fleet_sim.py` does (several real node workers a
Celery worker process, each with its heartbeat, package cache and sync loop), waits until every
node beats and holds the skill's package, and times the API's CPU again for `--seconds`, no runs.
Reported: both figures, the difference a node, and the requests the API answered meanwhile by
route and status, from its request log.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.fleet_sim import Fleet, cpu, serving, wait  # noqa: E402

# A node name, a run id or a package key in a path: counted as one route.
_VARIABLE = re.compile(r"/api/nodes/[^/]+/(manifest|packages|runs)(/[^/?]+)?")


def requests_by_route(log: Path, start: int) -> collections.Counter[str]:
    """The request log's lines after byte `start`, counted by method, route and status."""
    counted: collections.Counter[str] = collections.Counter()
    with log.open("rb") as lines:
        lines.seek(start)
        for raw in lines:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if entry.get("event") != "request":
                continue
            path = _VARIABLE.sub(lambda m: f"/api/nodes/NODE/{m.group(1)}", entry.get("path", ""))
            counted[f"{entry.get('method')} {path} {entry.get('status')}"] += 1
    return counted


def held_everywhere(client: redis.Redis, names: list[str]) -> bool:
    """Every node's heartbeat says it holds a package."""
    from relay import heartbeat

    found = heartbeat.workers_named(client, names)
    holding = {worker.get("name") for worker in found if worker.get("hashes")}
    return holding >= set(names)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_idle", description=__doc__)
    parser.add_argument("--nodes", type=int, default=110, help="idle nodes")
    parser.add_argument("--processes", type=int, default=5, help="worker processes")
    parser.add_argument("--seconds", type=float, default=120, help="seconds each side is timed")
    args = parser.parse_args(argv)
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/8")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        fleet = Fleet(root, redis_url)
        log = root / "requests.log"
        try:
            fleet.up(("--request-log", str(log)))
            fleet.install()
            names = [f"idle-{n:04d}" for n in range(args.nodes)]
            tokens = fleet.register(names)
            time.sleep(5)  # the API settles after the skill's install
            before = cpu([fleet.api])
            time.sleep(args.seconds)
            none = (cpu([fleet.api]) - before) / args.seconds
            print(f"the API, no node up: {none * 1000:6.2f} ms CPU/s over {args.seconds:.0f} s")
            fleet.group("idle", tokens, args.processes, concurrency=1)
            client = redis.Redis.from_url(redis_url)
            wait(lambda: serving(client, names) and held_everywhere(client, names), 600)
            time.sleep(5)
            start = log.stat().st_size
            before = cpu([fleet.api])
            time.sleep(args.seconds)
            idle = (cpu([fleet.api]) - before) / args.seconds
            print(
                f"the API, {args.nodes} idle nodes up: {idle * 1000:6.2f} ms CPU/s; "
                f"{(idle - none) * 1e6 / args.nodes:.1f} µs CPU/s a node over no node"
            )
            counted = requests_by_route(log, start)
            print(f"requests meanwhile ({sum(counted.values())}), by route and status:")
            for route, count in counted.most_common():
                print(f"  {count:6d}  {route}")
        finally:
            fleet.down()


if __name__ == "__main__":
    main()

"""Benchmark: a node run with the audit trail (always on) against the same code without it.

Run with `python bench/audit.py [--rounds N]`. It starts two systems side by side, each a real
`skillfleet api` and a node worker on a temporary SQLite data dir of its own and the Redis at
REDIS_URL (default redis://127.0.0.1:6379/14): one as deployed, one with
SKILLFLEET_BENCH_AUDIT_OFF=true (the switch exists for this benchmark only; every process of
that system appends nothing). Then it times node runs (REST call -> policy decision -> Celery ->
node worker -> script -> `?wait=` result, as bench/runs.py's node run) on both, interleaved
A B B A so a machine whose speed drifts weighs on both, and prints each side's p50 and p95 and
the ratio of the p50s, and the CPU per run its API and node worker spent (the ratio a busy
machine moves least). Each run with the audit appends three records: the policy's decision,
the run's start and its end. (The token `skillfleet tokens create` makes for either side is
audited on both: it is made before the clock starts, by the CLI on the database.)

The goal (docs/benchmarks.md): the ratio at most AUDIT_GOAL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.runs import Agent, System, median_ms, p95_ms  # noqa: E402

AUDIT_GOAL = 1.03
ROUNDS = 200
WARM_UP = 10


class NodeSystem(System):
    """An API and one node worker of a name of its own (no floor, no skeleton)."""

    def __init__(self, root: Path, node: str, audit: bool) -> None:
        super().__init__(root, spark=False)
        self.node = node
        if not audit:
            self.env["SKILLFLEET_BENCH_AUDIT_OFF"] = "true"

    def __enter__(self) -> NodeSystem:
        self.cli("db", "upgrade")
        token = self.cli("tokens", "create", "--owner", self.node, "--role", "owner")
        self.headers = {"Authorization": f"Bearer {token}"}
        key = self.cli("keys", "show")
        self.servers["api"] = self.start("api", "--workers", "2")
        self._wait(lambda: httpx.get(f"{self.url}/api/health").status_code == 200)
        node_env = dict(self.env, SKILLFLEET_MANIFEST_KEY=key)
        node_env["SKILLFLEET_NODE_TOKEN"] = self.cli(
            "nodes", "add", self.node, "--owner", self.node
        )
        self.labelled["node"] = self.start("worker", "node", "--name", self.node, env=node_env)
        self._wait(self._workers_ready)
        self.install("trivial", "node", {"scripts/ok.py": "print('ok')\n"})
        return self

    def _workers_ready(self) -> bool:
        nodes = httpx.get(f"{self.url}/api/nodes", headers=self.headers).json()
        return self.node in {n["name"] for n in nodes if n.get("alive")}

    def audit_records(self) -> str:
        response = httpx.get(
            f"{self.url}/api/audit", headers=self.headers, params={"page_size": 1}, timeout=60
        )
        return response.headers.get("X-Total-Count", "0")


def bench(on: NodeSystem, off: NodeSystem, rounds: int) -> dict[str, Any]:
    clients = {
        side: httpx.Client(base_url=system.url, headers=system.headers, timeout=120)
        for side, system in (("on", on), ("off", off))
    }
    agents = {"on": Agent("bench-audit-on"), "off": Agent("bench-audit-off")}
    systems = {"on": on, "off": off}

    def one(side: str) -> float:
        system = systems[side]
        start = time.perf_counter()
        system.run(clients[side], "trivial", "scripts/ok.py", system.node, agents[side])
        return time.perf_counter() - start

    for _ in range(WARM_UP):
        one("on")
        one("off")
    samples: dict[str, list[float]] = {"on": [], "off": []}
    before = {side: system.cpu_seconds() for side, system in systems.items()}
    for number in range(rounds):
        order = ("on", "off") if number % 2 == 0 else ("off", "on")
        for side in order:
            samples[side].append(one(side))
    after = {side: system.cpu_seconds() for side, system in systems.items()}
    cpu = {side: _cpu_ms_per_run(before[side], after[side], rounds) for side in systems}
    on_p50, off_p50 = median_ms(samples["on"]), median_ms(samples["off"])
    return {
        "rounds": rounds,
        "audit_on_p50_ms": round(on_p50, 2),
        "audit_on_p95_ms": round(p95_ms(samples["on"]), 2),
        "audit_off_p50_ms": round(off_p50, 2),
        "audit_off_p95_ms": round(p95_ms(samples["off"]), 2),
        "ratio_p50": round(on_p50 / off_p50, 3),
        "ratio_mean": round(statistics.fmean(samples["on"]) / statistics.fmean(samples["off"]), 3),
        "cpu_ms_per_run_on": cpu["on"],
        "cpu_ms_per_run_off": cpu["off"],
        "cpu_ratio": round(cpu["on"]["total"] / cpu["off"]["total"], 3),
        "goal": AUDIT_GOAL,
        "records_on": on.audit_records(),
        "records_off": off.audit_records(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def _cpu_ms_per_run(
    before: dict[str, float], after: dict[str, float], runs: int
) -> dict[str, float]:
    """The API's and the node worker's CPU per run (the scripts' own left out: the same on
    both sides), in ms."""
    parts = {
        part: round((after[label] - before[label]) * 1000 / runs, 2)
        for part, label in (("api", "api"), ("worker", "node worker"))
    }
    return {**parts, "total": round(sum(parts.values()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="runs of each side")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="skillfleet-bench-audit-") as folder:
        root = Path(folder)
        (root / "on").mkdir()
        (root / "off").mkdir()
        pid = os.getpid()
        with (
            NodeSystem(root / "on", f"audit-on-{pid}", audit=True) as on,
            NodeSystem(root / "off", f"audit-off-{pid}", audit=False) as off,
        ):
            found = bench(on, off, arguments.rounds)
    print(json.dumps(found, indent=2))
    verdict = "within" if found["ratio_p50"] <= AUDIT_GOAL else "over"
    print(f"node run with the audit: {found['ratio_p50']}x the same code without it "
          f"({verdict} the goal of {AUDIT_GOAL}x)")  # fmt: skip


if __name__ == "__main__":
    main()

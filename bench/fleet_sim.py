"""A fleet of 100 node workers on this machine, runs spread over them through the real API.
Prints figures; asserts nothing.

    python -m bench.fleet_sim [--nodes 100] [--baseline 10] [--processes 5] [--runs 240]

It starts a real `skillfleet api` (gunicorn, 2 workers) on a temporary SQLite data dir and the
Redis at `REDIS_URL` (redis://127.0.0.1:6379/8 unless set; emptied first), registers
`--baseline` + `--nodes` nodes for one owner, each with a node token of its own, and starts two
groups of node worker processes, `--processes` in each: the baseline's nodes spread over one
group, the fleet's over the other (with 100 nodes and 5 processes, 20 nodes a process).

Each node is a node worker as `skillfleet worker node --name NODE` makes one, only several
share a process: a queue (`node.NODE`), a heartbeat instance (`NODE@host:pid:…`, with its
features and the packages it holds, every SKILLFLEET_HEARTBEAT_SECONDS), a package cache
fetched and verified with its own node token, the package sync loop that listens for the API's
sync requests, and its runs claimed and recorded under its own worker id by the real task and
`workers.execute.execute`. One Celery worker process consumes its nodes' queues (`-Q
node.a,node.b,…`, thread pool, `--concurrency` threads shared by them) and picks each run's
node by the queue its message came from. The process's nodes share its runner (the same node
runner `skillfleet worker node` builds).

Then rounds of `--runs` runs from `--clients` agents at once (`run_skill_script` with
`?wait=60`, a trivial Python script), spread round-robin over the baseline's nodes or the
fleet's, the two alternated (A B B A …) so both see the same machine. Reported per side: runs
per second, and the CPU each part spent per run (the API's processes; the worker processes,
their scripts included) from psutil. Both groups are up the whole time, so the system has
every node registered and beating in both; the sides differ in how many nodes (queues,
worker ids, package caches) the same runs are spread over.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runs import SKILLFLEET, Agent, free_port, skill_zip  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OWNER = "fleet-sim"
TRIVIAL = "print('ok')\n"


# --- the worker process: several nodes in one Celery worker --------------------------------


class ByQueue:
    """The worker context of the node whose queue the current task's message came from: the
    real task (`workers/tasks.py` `execute_run`) reads it as it reads a node worker's one."""

    def __init__(self, contexts: dict[str, Any]) -> None:
        self.contexts = contexts

    def __getattr__(self, name: str) -> Any:
        from celery import current_task

        queue = current_task.request.delivery_info["routing_key"]
        return getattr(self.contexts[queue], name)


def serve(spec_path: str) -> None:
    """Serve the nodes in `spec_path` (JSON: nodes with their tokens, the concurrency)."""
    from celery.signals import worker_ready

    from relay import naming
    from relay.clients import Clients
    from relay.heartbeat import Beater, Instance
    from relay.retention import StreamCaps
    from skillfleet.cli_workers import _node_features, _node_runner, consume
    from store.settings import Settings
    from workers.agent import SyncLoop
    from workers.execute import WorkerContext
    from workers.packages import PackageCache
    from workers.runfiles import RunFiles
    from workers.runners.isolation import FEATURE

    spec = json.loads(Path(spec_path).read_text())
    settings = Settings.from_env()
    clients = Clients.build(settings)
    app = clients.celery
    app.skillfleet_clients = clients
    runner, reason = _node_runner(settings)
    if runner is None:
        raise SystemExit(reason)
    features = [*_node_features(), FEATURE[settings.node_run_as]]
    caps = StreamCaps.of(settings)
    contexts: dict[str, Any] = {}
    beaters: list[Beater] = []
    loops: list[SyncLoop] = []
    for node in spec["nodes"]:
        name, token = node["name"], node["token"]
        queue = naming.node_queue(name)
        instance = Instance(role="node", queue=queue, name=name, features=features)
        cache = PackageCache(
            settings.cache_dir / name, settings.api_url, name, token, settings.manifest_public_key
        )
        files = RunFiles(settings.api_url, name, token)
        contexts[queue] = WorkerContext(
            clients.sessions, clients.redis, instance, runner, cache, caps, files
        )

        def refresh(current: Instance, cache: PackageCache = cache) -> None:
            current.hashes = cache.held()

        beaters.append(
            Beater(
                clients.redis, instance, True, refresh, every=settings.heartbeat_seconds,
                alive_seconds=settings.worker_alive_seconds,
            )
        )  # fmt: skip
        loops.append(SyncLoop(cache, clients.redis, name))
    app.skillfleet_worker = ByQueue(contexts)

    def ready(**_: Any) -> None:
        for beater in beaters:
            beater.start()

    for loop in loops:
        loop.start()
    worker_ready.connect(ready, weak=False)
    try:
        hostname = f"fleet-sim-{os.getpid()}@%h"
        consume(app, list(contexts), hostname=hostname, concurrency=spec["concurrency"])
    finally:
        for beater in beaters:
            beater.stop()


# --- the system and the load ---------------------------------------------------------------


@dataclass
class Side:
    label: str
    nodes: list[str]
    processes: list[subprocess.Popen[bytes]]


class Fleet:
    """The API and both groups of node worker processes, on a temporary data dir."""

    def __init__(self, root: Path, redis_url: str) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.redis_url = redis_url
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")},
            "SKILLFLEET_DATA_DIR": str(root / "var"),
            "SKILLFLEET_PORT": str(self.port),
            "SKILLFLEET_URL": self.url,
            "REDIS_URL": redis_url,
            "PYTHONPATH": str(ROOT),
            "SKILLFLEET_STANDARD_ENV": "false",
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def cli(self, *arguments: str) -> str:
        result = subprocess.run(
            [*SKILLFLEET, *arguments], env=self.env, check=True, capture_output=True, text=True
        )
        return result.stdout.strip().splitlines()[-1]

    def start(self, arguments: list[str], log: str, env: dict[str, str] | None = None) -> Any:
        out = open(self.root / f"{log}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(arguments, env=env or self.env, stdout=out, stderr=out)
        self.processes.append(process)
        return process

    def up(self, api_arguments: tuple[str, ...] = ()) -> None:
        redis.Redis.from_url(self.redis_url).flushdb()
        self.cli("db", "upgrade")
        token = self.cli("tokens", "create", "--owner", OWNER, "--role", "owner")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.key = self.cli("keys", "show")
        self.api = self.start([*SKILLFLEET, "api", "--workers", "2", *api_arguments], "api")
        wait(lambda: httpx.get(f"{self.url}/api/health").status_code == 200, 120)

    def register(self, names: list[str]) -> dict[str, str]:
        """The nodes offered to the owner, each with a node token of its own."""
        from store import nodes
        from store.db import make_engine, make_sessions, transaction
        from store.settings import Settings
        from store.tokens import create_node_token

        settings = Settings.from_env(self.env)
        sessions = make_sessions(make_engine(settings.database))
        tokens = {}
        with transaction(sessions) as session:
            for name in names:
                nodes.register(session, name, OWNER)
                tokens[name] = create_node_token(session, name)
        return tokens

    def group(self, label: str, tokens: dict[str, str], processes: int, concurrency: int) -> Side:
        names = sorted(tokens)
        started = []
        env = dict(self.env, SKILLFLEET_MANIFEST_KEY=self.key)
        for index in range(processes):
            mine = names[index::processes]
            spec = self.root / f"{label}-{index}.json"
            spec.write_text(json.dumps({
                "nodes": [{"name": n, "token": tokens[n]} for n in mine],
                "concurrency": concurrency,
            }))  # fmt: skip
            started.append(
                self.start(
                    [sys.executable, "-m", "bench.fleet_sim", "serve", str(spec)],
                    f"{label}-{index}", env,
                )
            )  # fmt: skip
        return Side(label, names, started)

    def install(self) -> None:
        files = {"file": ("s.zip", skill_zip("trivial", "node", {"scripts/ok.py": TRIVIAL}))}
        response = httpx.post(f"{self.url}/api/skills", headers=self.headers, files=files)
        assert response.status_code == 201, response.text

    def run(self, client: httpx.Client, node: str, agent: Agent) -> None:
        body = {
            "arguments": {"skill_name": "trivial", "script": "scripts/ok.py",
                          "arguments": {"node": node}},
            **agent.fields(),
        }  # fmt: skip
        response = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
        envelope = response.json()
        assert envelope.get("status") == "done", envelope
        assert envelope["result"]["stdout"] == "ok\n", envelope

    def down(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def wait(check: Any, limit: float) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError("the fleet did not come up in time; see the logs")


def cpu(processes: list[subprocess.Popen[bytes]]) -> float:
    """CPU seconds of `processes`, each with its children, live and ended."""
    spent = 0.0
    for process in processes:
        try:
            root = psutil.Process(process.pid)
            times = root.cpu_times()
            spent += times.user + times.system + times.children_user + times.children_system
            for child in root.children(recursive=True):
                try:
                    spent += sum(child.cpu_times()[:2])
                except psutil.NoSuchProcess:
                    continue
        except psutil.NoSuchProcess:
            continue
    return spent


def idle_api(fleet: Fleet, seconds: float) -> float:
    """CPU seconds a second the API spends with no runs, every node up."""
    before = cpu([fleet.api])
    time.sleep(seconds)
    return (cpu([fleet.api]) - before) / seconds


def serving(client: redis.Redis, names: list[str]) -> bool:
    from relay import heartbeat, naming

    queues = [naming.node_queue(name) for name in names]
    return len(heartbeat.served_queues(client, queues)) == len(queues)


def load(fleet: Fleet, side: Side, runs: int, clients: int, idle: float) -> dict[str, float]:
    """`runs` runs from `clients` agents at once over the side's nodes, round-robin."""
    agents = [httpx.Client(base_url=fleet.url, headers=fleet.headers, timeout=120)
              for _ in range(clients)]  # fmt: skip
    share = runs // clients
    chats = [Agent(f"sim-{side.label}-{index}-{time.monotonic_ns()}") for index in range(clients)]

    def agent(index: int) -> None:
        for count in range(share):
            node = side.nodes[(index * share + count) % len(side.nodes)]
            fleet.run(agents[index], node, chats[index])

    api_before, workers_before = cpu([fleet.api]), cpu(side.processes)
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=clients) as pool:
        for future in [pool.submit(agent, index) for index in range(clients)]:
            future.result()
    elapsed = time.perf_counter() - began
    done = share * clients
    for client in agents:
        client.close()
    api = cpu([fleet.api]) - api_before
    return {
        "runs_per_second": done / elapsed,
        "api_ms": api * 1000 / done,
        # Less what the API spends meanwhile without runs (the nodes' package syncs).
        "api_net_ms": (api - idle * elapsed) * 1000 / done,
        "workers_ms": (cpu(side.processes) - workers_before) * 1000 / done,
    }


def main(argv: list[str] | None = None) -> None:
    if argv is None and sys.argv[1:2] == ["serve"]:
        serve(sys.argv[2])
        return
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_sim", description=__doc__)
    parser.add_argument("--nodes", type=int, default=100, help="the fleet's nodes")
    parser.add_argument("--baseline", type=int, default=10, help="the baseline's nodes")
    parser.add_argument("--processes", type=int, default=5, help="worker processes a side")
    parser.add_argument("--concurrency", type=int, default=4, help="threads a process")
    parser.add_argument("--runs", type=int, default=600, help="runs a round")
    parser.add_argument("--clients", type=int, default=12, help="agents calling at once")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each side")
    parser.add_argument("--idle", type=float, default=120, help="seconds the idle API is timed")
    args = parser.parse_args(argv)
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/8")
    with tempfile.TemporaryDirectory() as folder:
        fleet = Fleet(Path(folder), redis_url)
        try:
            fleet.up()
            names = [f"sim-{n:03d}" for n in range(args.baseline + args.nodes)]
            tokens = fleet.register(names)
            baseline = {n: tokens[n] for n in names[: args.baseline]}
            rest = {n: tokens[n] for n in names[args.baseline :]}
            sides = [
                fleet.group(f"{args.baseline}-nodes", baseline, args.processes, args.concurrency),
                fleet.group(f"{args.nodes}-nodes", rest, args.processes, args.concurrency),
            ]
            client = redis.Redis.from_url(redis_url)
            wait(lambda: serving(client, names), 600)
            fleet.install()
            print(
                f"{len(names)} nodes registered and beating; {args.processes} worker processes "
                f"a side ({args.concurrency} threads each); {args.runs} runs a round from "
                f"{args.clients} agents, {args.rounds} rounds a side, alternated",
                flush=True,
            )
            warming = Agent("sim-warm")
            with httpx.Client(base_url=fleet.url, headers=fleet.headers, timeout=120) as warm:
                for name in names:  # each node fetches and verifies its package once
                    fleet.run(warm, name, warming)
            idle = idle_api(fleet, args.idle)
            print(
                f"  the API without runs, every node up: {idle * 1000:.1f} ms CPU/s (over "
                f"{args.idle:.0f} s: heartbeats go to Redis; each node's package sync, once a "
                "minute, comes here)",
                flush=True,
            )
            found: dict[str, list[dict[str, float]]] = {side.label: [] for side in sides}
            # A B B A A B …: each side's rounds fall on the machine's busy moments alike.
            order = [side for turn in range(args.rounds) for side in sides[:: 1 - 2 * (turn % 2)]]
            for side in order:
                figures = load(fleet, side, args.runs, args.clients, idle)
                found[side.label].append(figures)
                print(
                    f"  round {side.label:>10}: {figures['runs_per_second']:6.2f} runs/s, API "
                    f"{figures['api_ms']:6.2f} ms CPU/run ({figures['api_net_ms']:6.2f} net), "
                    f"workers {figures['workers_ms']:6.2f} ms CPU/run",
                    flush=True,
                )
            report(found, sides)
        finally:
            fleet.down()


def report(found: dict[str, list[dict[str, float]]], sides: list[Side]) -> None:
    medians = {
        label: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for label, rounds in found.items()
    }
    base, big = (medians[side.label] for side in sides)
    print("median of the rounds:")
    for side in sides:
        figures = medians[side.label]
        print(
            f"  {side.label:>10}: {figures['runs_per_second']:6.2f} runs/s, API "
            f"{figures['api_ms']:6.2f} ms CPU/run ({figures['api_net_ms']:6.2f} net), workers "
            f"{figures['workers_ms']:6.2f} ms CPU/run"
        )
    net = big["api_net_ms"] / base["api_net_ms"]
    print(
        f"  ratio: throughput {big['runs_per_second'] / base['runs_per_second']:.2f}x, API CPU "
        f"per run {big['api_ms'] / base['api_ms']:.2f}x ({net:.2f}x net), workers CPU per run "
        f"{big['workers_ms'] / base['workers_ms']:.2f}x"
    )


if __name__ == "__main__":
    main()

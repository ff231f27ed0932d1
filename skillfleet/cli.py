"""The `skillfleet` command line."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from skillfleet import __version__
from skillfleet.cli_settings import load_settings
from skillfleet.heap import pause_collection

# Command groups by the module that defines them, imported when a command line names one: a
# command that talks to the API never loads what the server side needs (SQLAlchemy, the
# broker, jsonschema), which keeps each `skillfleet …` quick to start.
LAZY_COMMANDS = {
    "approvals": "skillfleet.cli_approvals:approvals",
    "audit": "skillfleet.cli_audit:audit",
    "beat": "skillfleet.cli_workers:beat_command",
    "env": "skillfleet.cli_env:env",
    "jobs": "skillfleet.cli_jobs:jobs",
    "keys": "skillfleet.cli_nodes:keys",
    "mcp": "skillfleet.cli_mcp:mcp",
    "models": "skillfleet.cli_models:models",
    "nodes": "skillfleet.cli_nodes:nodes",
    "owners": "skillfleet.cli_nodes:owners",
    "policy": "skillfleet.cli_policy:policy",
    "questions": "skillfleet.cli_questions:questions",
    "run": "skillfleet.cli_run:run",
    "runs": "skillfleet.cli_runs:runs",
    "secrets": "skillfleet.cli_secrets:secrets",
    "skills": "skillfleet.cli_skills:skills",
    "trusted-keys": "skillfleet.cli_trust:trusted_keys",
    "worker": "skillfleet.cli_workers:worker",
}
# Commands that run until stopped: no garbage collection while they start, until each has
# started (skillfleet/heap.py). `api` execs gunicorn, whose hooks do the same
# (skillfleet/serving.py). A short command is collected as usual: its start makes too few
# objects for a pause to pay for the collection that follows it.
STARTS_LONG = {"beat", "mcp", "up", "worker"}


class LazyGroup(click.Group):
    """A group whose LAZY_COMMANDS are imported on first use (click's documented pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in LAZY_COMMANDS:
            module, _, attribute = LAZY_COMMANDS[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            return command if isinstance(command, click.Command) else command()
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="skillfleet")
def cli() -> None:
    """skillfleet: Agent Skills for LLM agents, run safely across a fleet of machines.

    Every id a command takes may be given by a unique start of it, such as the eight
    characters the console shows.
    """


UP_ENVIRONMENT = """\b
Also read from the environment:
  DATABASE_URL                 PostgreSQL instead of SQLite under the data dir
  REDIS_URL                    a Redis server instead of the embedded one
  SKILLFLEET_BOOTSTRAP_TOKEN   the owner token to accept (else one is made and kept)
  SKILLFLEET_CONFIG            YAML config file (skills.paths: folders of skills)
  SKILLFLEET_POLICY            a policy file replacing the built-in policy
  SKILLFLEET_RUN_TIMEOUT       seconds a script may run (default 300)
  SKILLFLEET_LOG_LEVEL         debug, info, warning or error
See docs/configuration.md for every setting."""


@cli.command(epilog=UP_ENVIRONMENT)
@click.option("--host", envvar="SKILLFLEET_HOST", show_envvar=True, default=None,
              help="Address the API listens on  [default: 127.0.0.1]")  # fmt: skip
@click.option("--port", envvar="SKILLFLEET_PORT", show_envvar=True, type=int, default=None,
              help="Port the API listens on  [default: 8750]")  # fmt: skip
@click.option("--data-dir", envvar="SKILLFLEET_DATA_DIR", show_envvar=True, default=None,
              type=click.Path(file_okay=False, path_type=Path),
              help="Database, embedded Redis, skills and logs  [default: ./var]")  # fmt: skip
def up(host: str | None, port: int | None, data_dir: Path | None) -> None:
    """Run everything on this machine: API, embedded Redis, workers, SQLite under ./var.

    Prints "skillfleet is running" once the API answers and the local node worker (and the
    Spark worker, when Docker answers) are ready; Ctrl-C stops everything.
    """
    from skillfleet.up import run_up

    settings = load_settings()
    changes: dict[str, object] = {"host": host, "port": port, "data_dir": data_dir}
    settings = settings.with_overrides(**{k: v for k, v in changes.items() if v is not None})
    sys.exit(run_up(settings))


@cli.command()
@click.option("--workers", default=2, show_default=True, help="gunicorn worker processes")
@click.option(
    "--request-log",
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    default=None,
    help="Log a line per request to this file ('-': standard output)",
)
def api(workers: int, request_log: Path | None) -> None:
    """Run the REST API alone (gunicorn with uvicorn workers: Flask plus the live tier)."""
    from skillfleet.up import exec_api

    exec_api(load_settings(), workers, request_log)


@cli.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply the Alembic migrations."""
    from store.migrate import upgrade

    settings = load_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database, revision)
    click.echo(f"Database is at {revision}.")


@db.command("current")
def db_current() -> None:
    """Print the revision the database is at."""
    from store.migrate import current

    click.echo(current(load_settings().database) or "empty (no migration applied)")


@db.command("history")
def db_history() -> None:
    """List every migration, newest first; the database's revision is marked."""
    from store.migrate import current, history

    database = load_settings().database
    at = current(database)
    for revision, message in history():
        mark = "  <- database" if revision == at else ""
        click.echo(f"{revision}  {message}{mark}")


@db.command("downgrade", context_settings={"ignore_unknown_options": True})
@click.argument("revision")
@click.option("--yes", is_flag=True, help="Don't ask for confirmation")
def db_downgrade(revision: str, yes: bool) -> None:
    """Undo migrations down to REVISION (`-1` for one step, `base` for all); back up first."""
    from alembic.util import CommandError

    from store.migrate import downgrade

    if not yes:
        click.confirm(
            f"Downgrade the database to {revision}? Columns and tables added since are dropped",
            abort=True,
        )
    try:
        downgrade(load_settings().database, revision)
    except CommandError as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"Database is at {revision}.")


@cli.command()
def flower() -> None:
    """Run Flower, the Celery monitor, behind basic auth on SKILLFLEET_FLOWER_PORT."""
    from skillfleet.flower import exec_flower

    exec_flower(load_settings())


@cli.group()
def tokens() -> None:
    """API tokens: create one (on the server's machine), list and revoke yours (through the
    API, with SKILLFLEET_TOKEN)."""


@tokens.command("create")
@click.option("--owner", "owner_name", required=True, help="The owner's name")
@click.option(
    "--role",
    required=True,
    type=click.Choice(["agent", "owner"]),
    help="agent: call tools and read; owner: everything, approvals included",
)
@click.option("--label", default=None, help="What the token is for")
def tokens_create(owner_name: str, role: str, label: str | None) -> None:
    """Create an agent or owner token; it is printed once, alone on the last line."""
    from sqlalchemy import select
    from sqlalchemy.exc import DBAPIError

    from store.auditevents import audit_token
    from store.db import make_engine, make_sessions, transaction
    from store.errors import StoreError
    from store.models import ApiToken
    from store.tokens import create_token, token_digest

    settings = load_settings()
    sessions = make_sessions(make_engine(settings.database))
    try:
        with transaction(sessions) as session:
            token = create_token(session, owner_name, role, label=label)
            session.flush()
            row = session.scalar(select(ApiToken).where(ApiToken.token_hash == token_digest(token)))
            assert row is not None and row.owner_id is not None
            audit_token(session, row.owner_id, "operator", row.id, "created", role)
    except StoreError as e:
        raise click.ClickException(e.message) from e
    except DBAPIError as e:
        raise click.ClickException(
            f"Can't store the token in the database ({e.orig}); "
            "run `skillfleet db upgrade` (or `make up`) first."
        ) from e
    click.echo(
        f"Token for owner '{owner_name}', role {role} (shown once, store it safely):", err=True
    )
    click.echo(token)


@tokens.command("list")
def tokens_list() -> None:
    """List your owner and agent tokens through the API (never the tokens themselves)."""
    from skillfleet.cli_skills import call_api, table

    columns = [
        ("id", "ID"),
        ("role", "ROLE"),
        ("label", "LABEL"),
        ("created_at", "CREATED"),
        ("last_used_at", "LAST USED"),
        ("expires_at", "EXPIRES"),
    ]
    click.echo(table(call_api("GET", "/api/tokens"), columns))


@tokens.command("revoke")
@click.argument("token_id")
def tokens_revoke(token_id: str) -> None:
    """Delete the token TOKEN_ID (as `tokens list` shows it); refused at once, everywhere."""
    from skillfleet.cli_skills import call_api
    from skillfleet.client import ClientError
    from skillfleet.shortids import resolve_token

    try:
        number = resolve_token(token_id)
    except ClientError as e:
        click.echo(f"Error ({e.code}): {e.message}", err=True)
        sys.exit(1)
    call_api("DELETE", f"/api/tokens/{number}")
    click.echo(f"Revoked token {number}.")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in STARTS_LONG:  # no option comes before a command
        pause_collection()
    cli()

"""`skillfleet runs list|show|cancel|logs`: the owner's script runs."""

from __future__ import annotations

import sys

import click

from skillfleet.cli_run import stream_run
from skillfleet.cli_skills import call_api, call_list, full_id, table
from skillfleet.client import Client, ClientError
from skillfleet.shortids import RUN
from store.settings import ClientSettings
from store.states import RunStatus

STATES = [str(state) for state in RunStatus]


@click.group()
def runs() -> None:
    """Script runs: list, show, cancel and follow their output."""


@runs.command("list")
@click.option("--status", type=click.Choice(STATES), default=None, help="Only runs in this state")
@click.option(
    "--limit", default=20, show_default=True, type=click.IntRange(min=1),
    help="At most this many, newest first",
)  # fmt: skip
def list_cmd(status: str | None, limit: int) -> None:
    """List your runs, newest first."""
    params = {} if status is None else {"status": status}
    rows = call_list("/api/runs", params, limit)
    columns = [
        ("run_id", "RUN"),
        ("status", "STATUS"),
        ("skill_name", "SKILL"),
        ("script", "SCRIPT"),
        ("node", "NODE"),
        ("exit_code", "EXIT"),
        ("created_at", "CREATED"),
    ]
    click.echo(table(rows, columns))


@runs.command("show")
@click.argument("run_id")
def show(run_id: str) -> None:
    """Show one run's state and its output so far."""
    run_id = full_id(RUN, run_id)
    run = call_api("GET", f"/api/runs/{run_id}")
    for key in ("run_id", "status", "skill_name", "skill_hash", "script", "node", "isolation",
                "exit_code", "error", "created_at", "started_at", "finished_at"):  # fmt: skip
        value = run.get(key)
        click.echo(f"{key + ':':13} {'-' if value is None else value}")
    _print_output(run)


@runs.command("cancel")
@click.argument("run_id")
def cancel(run_id: str) -> None:
    """Cancel a queued or running run."""
    run_id = full_id(RUN, run_id)
    run = call_api("POST", f"/api/runs/{run_id}/cancel")
    state = run["status"]
    note = "" if state == "cancelled" else " (its runner stops it now)"
    click.echo(f"{run['run_id']}: {state}{note}")


@runs.command("logs")
@click.argument("run_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing output until the run ends")
def logs(run_id: str, follow: bool) -> None:
    """Print a run's output; with -f, follow it live and exit with the script's exit code."""
    run_id = full_id(RUN, run_id)
    if not follow:
        _print_output(call_api("GET", f"/api/runs/{run_id}"))
        return
    client = Client(ClientSettings.from_env(), timeout=None)
    try:
        sys.exit(stream_run(client, run_id))
    except ClientError as e:
        click.echo(f"Error ({e.code}): {e.message}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)  # stops following; the run goes on (`skillfleet runs cancel` stops it)


def _print_output(run: dict[str, object]) -> None:
    sys.stdout.write(str(run.get("stdout") or ""))
    sys.stderr.write(str(run.get("stderr") or ""))

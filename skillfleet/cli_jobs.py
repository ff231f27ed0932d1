"""`skillfleet jobs …`: scheduled jobs and their runs through the API."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from skillfleet.cli_skills import call_api, table
from store.states import JobRunStatus

END_STATES = ("succeeded", "failed", "unanswered", "skipped", "interrupted")
POLL_SECONDS = 1.0


@click.group()
def jobs() -> None:
    """Scheduled jobs: cron in a time zone, steps, grants and run history."""


@jobs.command("list")
def list_cmd() -> None:
    """List your jobs with their next run (UTC)."""
    columns = [
        ("id", "ID"),
        ("name", "NAME"),
        ("cron", "CRON"),
        ("time_zone", "TIME ZONE"),
        ("enabled", "ENABLED"),
        ("next_run_at", "NEXT RUN (UTC)"),
    ]
    click.echo(table(call_api("GET", "/api/jobs"), columns))


@jobs.command("show")
@click.argument("job_id")
def show(job_id: str) -> None:
    """Show one job as JSON: schedule, steps, grants, skills."""
    click.echo(json.dumps(call_api("GET", f"/api/jobs/{job_id}"), indent=2))


@jobs.command("create")
@click.argument("file", type=click.File("r"))
def create(file: Any) -> None:
    """Create a job from a JSON FILE ('-' reads standard input)."""
    try:
        body = json.load(file)
    except json.JSONDecodeError as e:
        raise click.ClickException(f"{file.name} is not valid JSON: {e.msg}.") from e
    job = call_api("POST", "/api/jobs", json=body)
    click.echo(f"Created job {job['id']} ({job['name']}); next run {job['next_run_at']} UTC.")


@jobs.command("run")
@click.argument("job_id")
@click.option("--wait", is_flag=True, help="Wait until the run ends; exit 0 if it succeeded.")
def run(job_id: str, wait: bool) -> None:
    """Run a job now."""
    run_id = call_api("POST", f"/api/jobs/{job_id}/run")["job_run_id"]
    click.echo(run_id)
    if not wait:
        return
    reported = ""
    while True:
        found = [r for r in call_api("GET", f"/api/jobs/{job_id}/runs") if r["id"] == run_id]
        if not found:
            raise click.ClickException("The run is no longer in the job's history.")
        current = found[0]
        if current["status"] != reported:
            reported = current["status"]
            _say(current)
        if reported in END_STATES:
            sys.exit(0 if reported == "succeeded" else 1)
        time.sleep(POLL_SECONDS)


@jobs.command("runs")
@click.argument("job_id")
def runs(job_id: str) -> None:
    """The job's runs, newest first."""
    rows = call_api("GET", f"/api/jobs/{job_id}/runs")
    for row in rows:
        row["why"] = row["error_message"] or ""
        row["steps_done"] = f"{sum(s['status'] == 'done' for s in row['steps'])}"
    columns = [
        ("id", "ID"),
        ("status", "STATUS"),
        ("trigger", "TRIGGER"),
        ("due_at", "DUE (UTC)"),
        ("steps_done", "STEPS DONE"),
        ("created_at", "CREATED"),
        ("why", "WHY"),
    ]
    click.echo(table(rows, columns))


def _say(run: dict[str, Any]) -> None:
    line = f"{run['status']}"
    if run["status"] == JobRunStatus.WAITING:
        line += (
            f": step {run['step'] + 1} waits for approval {run['approval_id']} "
            f"(skillfleet approvals approve {run['approval_id']})"
        )
    elif run["error_message"]:
        line += f": {run['error_message']} ({run['error_code']})"
    click.echo(line, err=True)

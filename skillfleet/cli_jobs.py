"""`skillfleet jobs …`: scheduled jobs and their runs through the API.

`jobs run --wait` and `jobs wait` end with an exit code a script can act on: EXIT_* below,
listed in docs/jobs.md.
"""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

import click

from skillfleet import jobedits
from skillfleet.cli_skills import call_api, call_list, full_id, table
from skillfleet.client import Client, ClientError
from skillfleet.shortids import JOB, job_run
from store.limits import KEPT_JOB_RUNS
from store.settings import ClientSettings
from store.states import JOB_RUNS, JobRunStatus

EXIT_SUCCEEDED = 0
EXIT_FAILED = 3  # the run ended without succeeding: failed, unanswered or interrupted
EXIT_WAITING = 75  # a step waits for the owner's approval (sysexits' EX_TEMPFAIL: try later)
EXIT_TIMEOUT = 124  # --timeout passed with the run still queued or running, as timeout(1) says
END_STATES = frozenset(JOB_RUNS.ends)
DEFAULT_WAIT_SECONDS = 600
POLL_SECONDS = 1.0

TIMEOUT_OPTION = click.option(
    "--timeout",
    type=click.IntRange(min=1),
    default=DEFAULT_WAIT_SECONDS,
    show_default=True,
    metavar="SECONDS",
    help=f"Stop waiting after this long (exit {EXIT_TIMEOUT}); the run goes on.",
)


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
    click.echo(table(call_list("/api/jobs"), columns))


@jobs.command("show")
@click.argument("job_id")
def show(job_id: str) -> None:
    """Show one job as JSON: schedule, steps, grants, skills."""
    job_id = full_id(JOB, job_id)
    click.echo(json.dumps(call_api("GET", f"/api/jobs/{job_id}"), indent=2))


@jobs.command("create")
@click.argument("file", type=click.File("r"))
def create(file: IO[str]) -> None:
    """Create a job from a JSON FILE ('-' reads standard input)."""
    job = call_api("POST", "/api/jobs", json=jobedits.json_of(file))
    click.echo(f"Created job {job['id']} ({job['name']}); {_schedule(job)}.")


@jobs.command("edit")
@click.argument("job_id")
@click.argument("file", type=click.File("r"), required=False)
@click.option("--name", help="The job's new name.")
@click.option("--cron", help="Five-field cron, read in the job's time zone.")
@click.option("--time-zone", help="An IANA time zone such as Europe/Berlin.")
@click.option(
    "--step",
    "steps",
    multiple=True,
    metavar="JSON",
    help='Replace the steps, one --step each, in order: {"tool": …, "arguments": {…}} or '
    '{"prompt": …}.',
)
@click.option(
    "--grant-skill",
    multiple=True,
    metavar="SKILL[@HASH]",
    help="Let the job run SKILL's scripts: its current version, or exactly HASH.",
)
@click.option(
    "--revoke-skill",
    multiple=True,
    metavar="SKILL",
    help="Take back the job's grants of SKILL, every version (or SKILL@HASH: that one).",
)
def edit(job_id: str, file: IO[str] | None, **options: Any) -> None:
    """Change a job; whatever you don't change stays as it is.

    FILE holds the fields to replace as JSON (as `jobs create` reads them, or as `jobs show`
    prints them; '-' reads standard input); each option changes one thing on top of it.
    """
    job_id = full_id(JOB, job_id)
    job = call_api("GET", f"/api/jobs/{job_id}")
    body = jobedits.body_of(job)
    if file is not None:
        body.update(jobedits.fields_of(file, job_id))
    jobedits.apply(body, options)
    if file is None and not any(options.values()):
        raise click.UsageError(
            "Nothing to change: give a FILE or an option such as --name, --cron, --step or "
            "--grant-skill."
        )
    saved = _save(job_id, body)
    click.echo(f"Updated job {saved['id']} ({saved['name']}); {_schedule(saved)}.")


@jobs.command("enable")
@click.argument("job_id")
def enable(job_id: str) -> None:
    """Let a job run on its schedule again."""
    job_id = full_id(JOB, job_id)
    _set_enabled(job_id, True)


@jobs.command("disable")
@click.argument("job_id")
def disable(job_id: str) -> None:
    """Stop a job running on its schedule; `jobs run` still runs it."""
    job_id = full_id(JOB, job_id)
    _set_enabled(job_id, False)


@jobs.command("delete")
@click.argument("job_id")
def delete(job_id: str) -> None:
    """Delete a job, its grants and its run history."""
    job_id = full_id(JOB, job_id)
    job = call_api("GET", f"/api/jobs/{job_id}")
    call_api("DELETE", f"/api/jobs/{job_id}")
    click.echo(f"Deleted job {job['id']} ({job['name']}), its grants and its run history.")


@jobs.command("run")
@click.argument("job_id")
@click.option(
    "--wait",
    is_flag=True,
    help=f"Wait until the run ends (exit {EXIT_SUCCEEDED} if it succeeded, {EXIT_FAILED} if not) "
    f"or a step waits for your approval (exit {EXIT_WAITING}).",
)
@TIMEOUT_OPTION
def run(job_id: str, wait: bool, timeout: int) -> None:
    """Run a job now; print the run's id."""
    job_id = full_id(JOB, job_id)
    _refuse_while_active(job_id)
    run_id = call_api("POST", f"/api/jobs/{job_id}/run")["job_run_id"]
    click.echo(run_id)
    if wait:
        sys.exit(_follow(job_id, run_id, timeout))


@jobs.command("wait")
@click.argument("job_id")
@click.argument("run_id", required=False)
@TIMEOUT_OPTION
def wait_cmd(job_id: str, run_id: str | None, timeout: int) -> None:
    """Wait for a run of a job (its newest without RUN_ID), as `jobs run --wait` does."""
    job_id = full_id(JOB, job_id)
    if run_id is None:
        newest = call_list(f"/api/jobs/{job_id}/runs")
        if not newest:
            raise click.ClickException(
                f"Job {job_id} has no runs yet; start one with `skillfleet jobs run {job_id}`."
            )
        run_id = str(newest[0]["id"])
    else:
        run_id = full_id(job_run(job_id), run_id)
    click.echo(run_id)
    sys.exit(_follow(job_id, run_id, timeout))


@jobs.command("runs")
@click.argument("job_id")
def runs(job_id: str) -> None:
    """The job's runs, newest first."""
    job_id = full_id(JOB, job_id)
    rows = call_list(f"/api/jobs/{job_id}/runs")
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


# -- waiting for a run -----------------------------------------------------------------


def _refuse_while_active(job_id: str) -> None:
    """A job runs once at a time (the API refuses a second): say how to follow the one on."""
    for row in call_list(f"/api/jobs/{job_id}/runs"):
        if row["status"] in JOB_RUNS.open:
            raise click.ClickException(
                f"Job {job_id} is still {row['status']} (run {row['id']}); follow that run with "
                f"`skillfleet jobs wait {job_id} {row['id']}`."
            )


def _follow(job_id: str, run_id: str, limit: float) -> int:
    """Say each state the run reaches until it ends, waits for the owner or `limit` seconds
    pass; the exit code that tells which."""
    deadline = time.monotonic() + limit
    reported = ""
    while True:
        current = _job_run(job_id, run_id)
        if current["status"] != reported:
            reported = current["status"]
            _say(current)
        if reported == JobRunStatus.WAITING:
            _how_to_answer(job_id, current)
            return EXIT_WAITING
        if reported in END_STATES:
            return EXIT_SUCCEEDED if reported == JobRunStatus.SUCCEEDED else EXIT_FAILED
        left = deadline - time.monotonic()
        if left <= 0:
            _gave_up(job_id, current, limit)
            return EXIT_TIMEOUT
        time.sleep(min(POLL_SECONDS, left))


def _job_run(job_id: str, run_id: str) -> dict[str, Any]:
    for row in call_list(f"/api/jobs/{job_id}/runs"):
        if row["id"] == run_id:
            return dict(row)
    raise click.ClickException(
        f"Run {run_id} is not in job {job_id}'s history (the newest {KEPT_JOB_RUNS} runs are "
        "kept); "
        f"see `skillfleet jobs runs {job_id}`."
    )


def _say(run: dict[str, Any]) -> None:
    line = f"{run['status']}"
    if run["status"] == JobRunStatus.WAITING:
        line += f": step {run['step'] + 1} waits for your approval {run['approval_id']}"
    elif run["error_message"]:
        line += f": {run['error_message']} ({run['error_code']})"
    click.echo(line, err=True)


def _how_to_answer(job_id: str, run: dict[str, Any]) -> None:
    """What the approval asks and the commands that answer it."""
    approval_id = run["approval_id"]
    approval = call_api("GET", f"/api/approvals/{approval_id}")
    answers = [(f"skillfleet approvals approve {approval_id}", "run this call, this once")]
    if approval.get("grant_scope") == "job":
        answers.append(
            (
                f"skillfleet approvals approve {approval_id} --for-job",
                "run it, and let this job's later runs do so without asking",
            )
        )
    answers.append((f"skillfleet approvals deny {approval_id}", "decline it; the run fails"))
    width = max(len(command) for command, _ in answers)
    click.echo(f"It asks to call {approval['tool']}: {approval['warning']}", err=True)
    click.echo("Answer it with one of:", err=True)
    for command, meaning in answers:
        click.echo(f"  {command.ljust(width)}  {meaning}", err=True)
    click.echo(
        f"The run carries on once you answer; wait for it with "
        f"`skillfleet jobs wait {job_id} {run['id']}`.",
        err=True,
    )


def _gave_up(job_id: str, run: dict[str, Any], limit: float) -> None:
    status = run["status"]
    why = ""
    if status == JobRunStatus.QUEUED:
        why = (
            " Is a control worker running? `skillfleet up` starts one; on its own it is "
            "`skillfleet worker control`."
        )
    click.echo(
        f"Stopped waiting after {limit:g} s: run {run['id']} is still {status}.{why} "
        f"Wait again with `skillfleet jobs wait {job_id} {run['id']}` (and a longer --timeout).",
        err=True,
    )


# -- saving a job -----------------------------------------------------------------------


def _save(job_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """PUT the whole job; a refusal is told in the options' words, and changes nothing."""
    try:
        saved = Client(ClientSettings.from_env()).json("PUT", f"/api/jobs/{job_id}", json=body)
    except ClientError as e:
        message = jobedits.in_option_words(e.message)
        click.echo(f"Error ({e.code}): {message} Nothing was changed.", err=True)
        for problem in e.errors:
            click.echo(f"  - {problem}", err=True)
        sys.exit(1)
    return dict(saved)


def _set_enabled(job_id: str, enabled: bool) -> None:
    job = call_api("GET", f"/api/jobs/{job_id}")
    word = "enabled" if enabled else "disabled"
    if job["enabled"] != enabled:
        job = _save(job_id, dict(jobedits.body_of(job), enabled=enabled))
        click.echo(f"{word.capitalize()} job {job['id']} ({job['name']}); {_schedule(job)}.")
    else:
        click.echo(f"Job {job['id']} ({job['name']}) is already {word}; {_schedule(job)}.")


def _schedule(job: dict[str, Any]) -> str:
    if job["next_run_at"]:
        return f"next run {job['next_run_at']} UTC"
    return f"it runs only when you run it (`skillfleet jobs run {job['id']}`)"

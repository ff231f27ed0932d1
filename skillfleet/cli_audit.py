"""`skillfleet audit export|verify`: the owner's audit trail, as the API exports it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import click
import httpx

from skillfleet.client import Client, ClientError
from store.auditchain import KINDS, Checked, verify
from store.settings import ClientSettings


@click.group()
def audit() -> None:
    """The audit trail: every decision, answer, run, secret release and change, chained."""


@audit.command("export")
@click.option("-o", "--output", type=click.File("w"), default="-", help="Where (default stdout)")
@click.option("--kind", type=click.Choice(KINDS), default=None, help="Only records of this kind")
@click.option("--subject", default=None, help="Only records about this id or name")
@click.option("--since", default=None, help="Only records at or after this ISO 8601 time")
@click.option("--until", default=None, help="Only records before this ISO 8601 time")
def export(output: IO[str], **filters: str | None) -> None:
    """Write your audit records as JSON Lines, oldest first."""
    params = {name: value for name, value in filters.items() if value is not None}
    try:
        for line in _export_lines(params):
            output.write(line + "\n")
    except ClientError as e:
        _fail(e)


@audit.command("verify")
@click.option(
    "--file", "path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
    help="Check a saved export instead of asking the API",
)  # fmt: skip
def verify_cmd(path: Path | None) -> None:
    """Check that your audit chain is whole: exit 1 naming the first record that breaks it."""
    try:
        if path is None:
            checked = verify(_records(_export_lines({})))
        else:
            with path.open(encoding="utf-8") as lines:
                checked = verify(_records(line.rstrip("\n") for line in lines))
    except ClientError as e:
        _fail(e)
    except ValueError as e:
        click.echo(f"Error: a line of the export is not a JSON record ({e}).", err=True)
        sys.exit(1)
    _report(checked)


def _report(checked: Checked) -> None:
    if checked.broken is not None:
        where = "a record" if checked.broken.seq is None else f"seq {checked.broken.seq}"
        click.echo(f"The audit chain is broken at {where}: {checked.broken.reason}.", err=True)
        if checked.last_seq is not None:
            click.echo(f"Records up to seq {checked.last_seq} hold.", err=True)
        sys.exit(1)
    if checked.records == 0:
        click.echo("The audit trail holds no records yet.")
        return
    click.echo(
        f"The audit chain holds: {checked.records} records, seq {checked.first_seq} to "
        f"{checked.last_seq}; the last hash is {checked.last_hash}."
    )


def _records(lines: Iterator[str] | Any) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.strip():
            found = json.loads(line)
            if not isinstance(found, dict):
                raise ValueError("not an object")
            yield found


def _export_lines(params: dict[str, str]) -> Iterator[str]:
    """The export's lines as they arrive: a long trail is never held whole."""
    client = Client(ClientSettings.from_env(), timeout=None)
    query = {**params, "format": "jsonl"}
    try:
        with client.http.stream("GET", "/api/audit", params=query) as response:
            if response.status_code >= 400:
                response.read()
                raise client.error_of(response)
            yield from response.iter_lines()
    except httpx.HTTPError as e:
        raise ClientError(
            f"Can't reach skillfleet at {client.base}: {e}.", code="unreachable"
        ) from e


def _fail(error: ClientError) -> None:
    click.echo(f"Error ({error.code}): {error.message}", err=True)
    sys.exit(1)

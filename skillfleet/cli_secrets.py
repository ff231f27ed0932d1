"""`skillfleet secrets …`: the owner's secrets by name, set without echo, and which skill
versions may have them (docs/secrets.md)."""

from __future__ import annotations

import getpass
import sys
from urllib.parse import quote

import click

from skillfleet.cli_skills import call_api, table


@click.group()
def secrets() -> None:
    """The owner's secrets, which skills' scripts get as environment variables."""


@secrets.command("list")
def list_cmd() -> None:
    """List secrets by name (never a value), then the skills that declare some."""
    found = call_api("GET", "/api/secrets")
    columns = [("name", "NAME"), ("skill", "SKILL"), ("allowed", "ALLOWED"), ("updated_at", "SET")]
    click.echo(table(found["secrets"], columns))
    if found["skills"]:
        click.echo()
        for row in found["skills"]:
            row["version"] = row["hash"][:8]
            row["declared"] = " ".join(row["declared"])
            row["missing"] = " ".join(row["missing"]) or None
        columns = [("skill", "SKILL"), ("version", "VERSION"), ("declared", "DECLARES"),
                   ("missing", "MISSING"), ("allowed", "ALLOWED")]  # fmt: skip
        click.echo(table(found["skills"], columns))


@secrets.command("set")
@click.argument("name")
@click.option("--skill", default=None, help="The skill it belongs to; it also allows its version")
def set_cmd(name: str, skill: str | None) -> None:
    """Set NAME: typed at a prompt that does not echo, or read from stdin when piped."""
    if sys.stdin.isatty():
        value = getpass.getpass(f"Value of {name} (not shown): ")
    else:
        value = sys.stdin.read().removesuffix("\n")
    if not value:
        raise click.ClickException("No value was given; nothing was stored.")
    body = {"value": value, "skill": skill} if skill else {"value": value}
    shown = call_api("PUT", f"/api/secrets/{quote(name, safe='')}", json=body)
    where = f" for {shown['skill']}" if shown["skill"] else ""
    click.echo(f"{shown['name']}{where} is set.")


@secrets.command("delete")
@click.argument("name")
@click.option("--skill", default=None, help="Delete the skill's own secret of that name")
def delete_cmd(name: str, skill: str | None) -> None:
    """Delete NAME (the owner's own, or with --skill the skill's)."""
    params = {"skill": skill} if skill else {}
    call_api("DELETE", f"/api/secrets/{quote(name, safe='')}", params=params)
    click.echo(f"{name} is deleted.")


@secrets.command("allow")
@click.argument("skill")
@click.option("--hash", "skill_hash", default=None, help="The version you reviewed (default: now)")
def allow_cmd(skill: str, skill_hash: str | None) -> None:
    """Let SKILL's current version (or --hash) have the secrets it declares."""
    path = f"/api/secrets/skills/{quote(skill, safe='')}"
    if skill_hash is None:
        skill_hash = call_api("GET", f"/api/skills/{quote(skill, safe='')}")["hash"]
    allowed = call_api("PUT", path, json={"hash": skill_hash})
    click.echo(f"{allowed['skill']}@{allowed['hash'][:8]} may have its secrets.")


@secrets.command("disallow")
@click.argument("skill")
def disallow_cmd(skill: str) -> None:
    """Withdraw SKILL's leave to have its secrets."""
    call_api("DELETE", f"/api/secrets/skills/{quote(skill, safe='')}")
    click.echo(f"{skill} no longer gets its secrets.")

"""`skillfleet trusted-keys …`: the SSH keys the owner trusts to sign skills, and whether
skills need such a signature (docs/signing.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import quote

import click

from skillfleet.cli_skills import call_api, call_list, table


@click.group("trusted-keys")
def trusted_keys() -> None:
    """SSH keys trusted to sign skills (skillfleet.sig), and the owner's require-signature."""


@trusted_keys.command("list")
def list_cmd() -> None:
    """List the keys you trust, by name."""
    rows = call_list("/api/trusted-keys")
    columns = [("name", "NAME"), ("key_type", "TYPE"), ("bits", "BITS"),
               ("fingerprint", "FINGERPRINT"), ("comment", "COMMENT")]  # fmt: skip
    click.echo(table(rows, columns))


@trusted_keys.command("add")
@click.argument("key_file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@click.option("--name", default=None, help="What signed skills show; default: the principal")
def add_cmd(key_file: Path, name: str | None) -> None:
    """Trust the key in KEY_FILE: a .pub file, or an allowed_signers file (each of its keys,
    named by its principal). `-` reads standard input."""
    text = sys.stdin.read() if str(key_file) == "-" else _read(key_file)
    lines = [line.strip() for line in text.splitlines()]
    keys = [line for line in lines if line and not line.startswith("#")]
    if not keys:
        raise click.ClickException(f"{key_file} holds no key.")
    if name is not None and len(keys) > 1:
        raise click.ClickException("--name names one key; the file holds several.")
    for line in keys:
        trusted = call_api("POST", "/api/trusted-keys", json={"name": name, "public_key": line})
        click.echo(f"Trusted {trusted['name']}: {trusted['key_type']} {trusted['fingerprint']}")


@trusted_keys.command("remove")
@click.argument("name")
def remove_cmd(name: str) -> None:
    """Trust the key NAME no longer; skills it signed become untrusted (and held, switched
    off, when you require signatures)."""
    call_api("DELETE", f"/api/trusted-keys/{quote(name, safe='')}")
    click.echo(f"{name} is no longer trusted.")


@trusted_keys.command("require")
@click.argument("state", type=click.Choice(["on", "off"]))
def require_cmd(state: str) -> None:
    """Require a trusted signature (on): skills no trusted key signed import disabled and are
    enabled only with `skills enable --override-signature`. Off lifts every hold."""
    current = call_api("GET", "/api/settings")
    body = {"auto_tools": current["auto_tools"], "require_signature": state == "on"}
    settings = call_api("PUT", "/api/settings", json=body)
    said = "now required" if settings["require_signature"] else "no longer required"
    click.echo(f"A trusted signature is {said}.")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise click.ClickException(f"{path} can't be read as text: {e}") from e

"""`skillfleet nodes …` (managed servers and their tokens) and `skillfleet keys show`."""

from __future__ import annotations

import os
from pathlib import Path

import click

from skillfleet.cli_settings import load_settings
from skillfleet.cli_skills import call_api, table

NODE_NAME_RULE = (
    "A node name is 1-64 characters of a-z, 0-9 and hyphens, "
    "starting and ending with a letter or digit."
)


@click.group()
def nodes() -> None:
    """Managed nodes and their agents."""


@nodes.command("add")
@click.argument("name")
def nodes_add(name: str) -> None:
    """Register a node and create its token; the token is printed once, alone on the last line."""
    from sqlalchemy.exc import DBAPIError

    from relay.naming import is_node_name
    from store.db import make_engine, make_sessions, transaction
    from store.models import Node
    from store.tokens import create_node_token

    if not is_node_name(name):
        raise click.ClickException(NODE_NAME_RULE)
    settings = load_settings()
    engine = make_engine(settings.database)
    try:
        with transaction(make_sessions(engine)) as session:
            if session.get(Node, name) is not None:
                raise click.ClickException(f"A node named '{name}' is already registered.")
            session.add(Node(name=name))
            token = create_node_token(session, name)
    except DBAPIError as e:
        raise click.ClickException(
            f"Can't register the node in the database ({e.orig}); "
            "run `skillfleet db upgrade` (or `make up`) first."
        ) from e
    finally:
        engine.dispose()
    click.echo(
        f"Node '{name}' registered. On that server run `skillfleet worker node --name {name}` "
        "with SKILLFLEET_URL, SKILLFLEET_MANIFEST_KEY (`skillfleet keys show`) and "
        "SKILLFLEET_NODE_TOKEN set to this token (shown once, store it safely):",
        err=True,
    )
    click.echo(token)


@nodes.command("enroll")
@click.argument("name")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the token to this file (0600) instead of printing it; kept if it is still valid",
)
def nodes_enroll(name: str, token_file: Path | None) -> None:
    """Register NAME if new and issue it a node token, printed once (or written to a file).

    Unlike `nodes add`, enrolling a registered node is not an error: an unattended set-up step
    (a container's init, a configuration tool) can run it on every start.
    """
    from sqlalchemy.exc import DBAPIError

    from relay.naming import is_node_name
    from store.db import make_engine, make_sessions, transaction
    from store.models import Node
    from store.tokens import authenticate, create_node_token

    if not is_node_name(name):
        raise click.ClickException(NODE_NAME_RULE)
    kept = _read_token(token_file)
    engine = make_engine(load_settings().database)
    try:
        with transaction(make_sessions(engine)) as session:
            if session.get(Node, name) is None:
                session.add(Node(name=name))
            principal = authenticate(session, kept) if kept else None
            if principal is not None and principal.node_name == name:
                click.echo(
                    f"Node '{name}' is enrolled; its token in {token_file} is valid.", err=True
                )
                return
            token = create_node_token(session, name)
    except DBAPIError as e:
        raise click.ClickException(
            f"Can't enroll the node in the database ({e.orig}); run `skillfleet db upgrade` first."
        ) from e
    finally:
        engine.dispose()
    if token_file is None:
        click.echo(f"Node token for '{name}' (shown once, store it safely):", err=True)
        click.echo(token)
        return
    _write_private(token_file, token)
    click.echo(f"Node '{name}' enrolled; its token is in {token_file}.", err=True)


def _read_token(path: Path | None) -> str | None:
    if path is None or not path.exists():
        return None
    return path.read_text(encoding="utf-8").strip() or None


def _write_private(path: Path, text: str) -> None:
    """Write `text` readable by this user only, replacing the file in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")
    os.replace(partial, path)


@nodes.command("list")
def nodes_list() -> None:
    """List nodes: registered or live, features, skills held and last heartbeat."""
    rows = call_api("GET", "/api/nodes")
    for row in rows:
        row["features_text"] = ",".join(row["features"]) or None
        row["packages"] = sum(len(hashes) for hashes in row["hashes"].values())
        row["worker_count"] = len(row["workers"])
    columns = [
        ("name", "NAME"),
        ("registered", "REGISTERED"),
        ("alive", "ALIVE"),
        ("worker_count", "WORKERS"),
        ("features_text", "FEATURES"),
        ("packages", "PACKAGES"),
        ("last_heartbeat", "LAST HEARTBEAT"),
    ]
    click.echo(table(rows, columns))


@click.group()
def keys() -> None:
    """The manifest signing key."""


@keys.command("show")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the key to this file instead of printing it",
)
def keys_show(output: Path | None) -> None:
    """Print the manifest public key (created on first use); nodes set SKILLFLEET_MANIFEST_KEY."""
    from store.errors import ConfigError
    from store.signing import load_or_create_key, public_key_text

    settings = load_settings()
    try:
        key = load_or_create_key(settings.keys_dir)
    except (ConfigError, OSError) as e:
        raise click.ClickException(str(e)) from e
    if output is not None:
        _write_private(output, public_key_text(key))
        click.echo(f"Manifest public key written to {output}.", err=True)
        return
    click.echo("Manifest public key (set SKILLFLEET_MANIFEST_KEY on every node):", err=True)
    click.echo(public_key_text(key))

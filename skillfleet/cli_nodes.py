"""`skillfleet nodes …` (managed servers and their tokens) and `skillfleet keys show`."""

from __future__ import annotations

from typing import Any

import click

from skillfleet.cli_skills import call_api, table


def _settings() -> Any:
    from skillfleet.cli import load_settings

    return load_settings()


@click.group()
def nodes() -> None:
    """Managed nodes and their agents."""


@nodes.command("add")
@click.argument("name")
def nodes_add(name: str) -> None:
    """Register a node and create its token; the token is printed once, alone on the last line."""
    from sqlalchemy.exc import DBAPIError

    from store.db import make_engine, make_sessions, transaction
    from store.models import Node
    from store.tokens import create_node_token
    from workers.naming import is_node_name

    if not is_node_name(name):
        raise click.ClickException(
            "A node name is 1-64 characters of a-z, 0-9 and hyphens, "
            "starting and ending with a letter or digit."
        )
    settings = _settings()
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
def keys_show() -> None:
    """Print the manifest public key (created on first use); nodes set SKILLFLEET_MANIFEST_KEY."""
    from store.errors import ConfigError
    from store.signing import load_or_create_key, public_key_text

    settings = _settings()
    try:
        key = load_or_create_key(settings.keys_dir)
    except (ConfigError, OSError) as e:
        raise click.ClickException(str(e)) from e
    click.echo("Manifest public key (set SKILLFLEET_MANIFEST_KEY on every node):", err=True)
    click.echo(public_key_text(key))

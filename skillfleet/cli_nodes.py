"""`skillfleet nodes …` (managed servers and their tokens) and `skillfleet keys show`."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

from skillfleet.cli_settings import load_settings
from skillfleet.cli_skills import call_list, table
from store.names import RUNNERS

NODE_NAME_RULE = (
    "A node name is 1-64 characters of a-z, 0-9 and hyphens, "
    "starting and ending with a letter or digit."
)


@click.group()
def nodes() -> None:
    """Managed nodes and their agents."""


OWNER_HELP = "The owner whose scripts may run there (by name); see `nodes share` for more"
SHARING = (
    "Several owners' scripts now run on '{node}'. Each run has a uid and namespaces of its own "
    "(it can't read another run's secrets, the worker's token or the data folder), but all "
    "of them reach what that server's network and world-readable files offer. A worker "
    "started with SKILLFLEET_NODE_RUN_AS=worker runs no owner's scripts on a shared node."
)


@nodes.command("add")
@click.argument("name")
@click.option("--owner", default=None, help=OWNER_HELP + " (not for the runners spark, sandbox)")
def nodes_add(name: str, owner: str | None) -> None:
    """Register a node for an owner (or the Spark's or sandbox's worker) and create its token;
    the token is printed once, alone on the last line."""
    from sqlalchemy.exc import DBAPIError

    from relay.naming import is_node_name
    from store import nodes as registry
    from store.db import make_engine, make_sessions, transaction
    from store.errors import StoreError
    from store.models import Node
    from store.tokens import create_node_token

    if not is_node_name(name):
        raise click.ClickException(NODE_NAME_RULE)
    _check_owner(name, owner)
    settings = load_settings()
    engine = make_engine(settings.database)
    try:
        with transaction(make_sessions(engine)) as session:
            if session.get(Node, name) is not None:
                raise click.ClickException(f"A node named '{name}' is already registered.")
            registry.register(session, name, owner)
            token = create_node_token(session, name)
    except StoreError as e:
        raise click.ClickException(e.message) from e
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
@click.option("--owner", default=None, help=OWNER_HELP + " (needed when NAME is new)")
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the token to this file (0600) instead of printing it; kept if it is still valid",
)
def nodes_enroll(name: str, owner: str | None, token_file: Path | None) -> None:
    """Register NAME if new (for --owner) and issue it a node token, printed once (or written
    to a file).

    Unlike `nodes add`, enrolling a registered node is not an error: an unattended set-up step
    (a container's init, a configuration tool) can run it on every start.
    """
    from sqlalchemy.exc import DBAPIError

    from relay.naming import is_node_name
    from store import nodes as registry
    from store.db import make_engine, make_sessions, transaction
    from store.errors import StoreError
    from store.models import Node
    from store.tokens import authenticate, create_node_token

    if not is_node_name(name):
        raise click.ClickException(NODE_NAME_RULE)
    kept = _read_token(token_file)
    engine = make_engine(load_settings().database)
    try:
        with transaction(make_sessions(engine)) as session:
            if session.get(Node, name) is None and owner is None and name not in RUNNERS:
                raise click.ClickException(f"'{name}' is new: name its owner with --owner.")
            registry.register(session, name, owner)
            principal = authenticate(session, kept) if kept else None
            if principal is not None and principal.node_name == name:
                click.echo(
                    f"Node '{name}' is enrolled; its token in {token_file} is valid.", err=True
                )
                return
            token = create_node_token(session, name)
    except StoreError as e:
        raise click.ClickException(e.message) from e
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


def _check_owner(name: str, owner: str | None) -> None:
    """A node needs its owner; a runner every owner shares has none."""
    if name in RUNNERS and owner is not None:
        raise click.ClickException(f"'{name}' is a runner every owner shares; it takes no --owner.")
    if name not in RUNNERS and owner is None:
        raise click.ClickException(f"Name the owner of '{name}' with --owner.")


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


@nodes.command("share")
@click.argument("name")
@click.argument("owner")
@click.option("--yes", is_flag=True, help="Share without asking (for scripts)")
def nodes_share(name: str, owner: str, yes: bool) -> None:
    """Offer node NAME to OWNER too: that owner's scripts may run there beside the others'."""
    from store import nodes as registry

    def change(session: Session) -> str:
        others = [o for o in registry.owner_names(session, name) if o != owner]
        if others and not yes:
            click.confirm(
                f"'{name}' is offered to {', '.join(others)}. "
                + SHARING.format(node=name)
                + f" Offer it to {owner} too?",
                abort=True,
            )
        new = registry.share(session, name, owner)
        if not new:
            return f"'{name}' is offered to {owner} already."
        return f"'{name}' is now offered to {owner}" + (" too." if others else ".")

    click.echo(_change_owners(change))


@nodes.command("unshare")
@click.argument("name")
@click.argument("owner")
def nodes_unshare(name: str, owner: str) -> None:
    """Stop offering node NAME to OWNER: their calls naming it are refused from now on."""
    from store import nodes as registry

    def change(session: Session) -> str:
        if not registry.unshare(session, name, owner):
            return f"'{name}' was not offered to {owner}."
        return f"'{name}' is no longer offered to {owner}."

    click.echo(_change_owners(change))


@nodes.command("owners")
@click.argument("name")
def nodes_owners(name: str) -> None:
    """The owners node NAME is offered to, one per line."""
    from store import nodes as registry

    def read(session: Session) -> str:
        return "\n".join(registry.owner_names(session, name)) or f"'{name}' is no one's."

    click.echo(_change_owners(read))


def _change_owners(change: Callable[[Session], str]) -> str:
    """Run `change` in one transaction of the database the settings name; its sentence."""
    from sqlalchemy.exc import DBAPIError

    from store.db import make_engine, make_sessions, transaction
    from store.errors import StoreError

    engine = make_engine(load_settings().database)
    try:
        with transaction(make_sessions(engine)) as session:
            return change(session)
    except StoreError as e:
        raise click.ClickException(e.message) from e
    except DBAPIError as e:
        raise click.ClickException(
            f"Can't change the node's owners in the database ({e.orig})."
        ) from e
    finally:
        engine.dispose()


@nodes.command("list")
def nodes_list() -> None:
    """List nodes: registered or live, features, skills held and last heartbeat."""
    rows = call_list("/api/nodes")
    for row in rows:
        row["shared_text"] = "yes" if row.get("shared") else None
        row["runs_as_text"] = row.get("runs_as")
        row["features_text"] = ",".join(row["features"]) or None
        row["packages"] = sum(len(hashes) for hashes in row["hashes"].values())
        row["worker_count"] = len(row["workers"])
    columns = [
        ("name", "NAME"),
        ("registered", "REGISTERED"),
        ("alive", "ALIVE"),
        ("health", "HEALTH"),
        ("worker_count", "WORKERS"),
        ("features_text", "FEATURES"),
        ("runs_as_text", "RUNS AS"),
        ("shared_text", "SHARED"),
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


@click.group()
def owners() -> None:
    """The people skillfleet acts for: their skills, nodes, tokens and approvals."""


@owners.command("add")
@click.argument("name")
def owners_add(name: str) -> None:
    """Make the owner NAME, to offer nodes to before any of its tokens exist (kept if it is)."""
    from sqlalchemy import select

    from store.models import Owner
    from store.tokens import ensure_owner

    def add(session: Session) -> str:
        if session.scalar(select(Owner.id).where(Owner.name == name)) is not None:
            return f"The owner '{name}' exists already."
        ensure_owner(session, name)
        return f"The owner '{name}' was made."

    click.echo(_change_owners(add))


@owners.command("list")
def owners_list() -> None:
    """Every owner's name, one per line."""
    from sqlalchemy import select

    from store.models import Owner

    def listed(session: Session) -> str:
        return "\n".join(session.scalars(select(Owner.name).order_by(Owner.name)))

    click.echo(_change_owners(listed))

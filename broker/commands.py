"""run_command's arguments, read once: which node, the argv it runs, and for how long.

The command is split with `shlex.split` and executed without a shell, unless the owner's
settings say otherwise (`run_command_shell`); then it runs as `/bin/sh -c <command>`. Whether
a shell runs is part of the normalised arguments the owner approves, so an approved call runs
exactly what was shown even if the setting changes meanwhile.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

import redis

from broker.errors import InvalidCall, NodeOffline
from broker.fleet import node_is_live, runs_as, usable_node
from relay import naming
from relay.errors import BackendUnavailable
from store.db import SessionFactory
from store.limits import MAX_COMMAND_BYTES, MAX_COMMAND_TIMEOUT_SECONDS
from store.models import Owner
from store.names import RUNNERS

SHELL = ("/bin/sh", "-c")
EXECUTION = "node"  # a command runs on its node's queue, by the node runner
FIELDS = frozenset({"node", "command", "timeout", "shell"})


@dataclass(frozen=True)
class Command:
    """A run_command call as it will run."""

    node: str
    text: str
    argv: tuple[str, ...]
    shell: bool
    timeout: int | None  # None: the operator's run timeout
    runs_as: str | None = None  # how the node's worker runs it: "uid", "worker" (None: unknown)

    def as_json(self) -> dict[str, Any]:
        """The normalised arguments: what the owner approves and the approved call replays."""
        shown: dict[str, Any] = {"node": self.node, "command": self.text, "shell": self.shell}
        if self.timeout is not None:
            shown["timeout"] = self.timeout
        return shown


def read_command(
    arguments: dict[str, Any],
    sessions: SessionFactory,
    owner_id: int,
    client: redis.Redis | None,
) -> Command:
    """The checked command; a call that could not run fails here, before anyone is asked."""
    unknown = sorted(str(key)[:64] for key in arguments if key not in FIELDS)
    if unknown:
        raise InvalidCall(f"HOST: run_command takes node, command and timeout, not {unknown}.")
    text = _text(arguments.get("command"))
    shell = _shell(sessions, owner_id)
    asked = arguments.get("shell", shell)
    if asked is not shell:
        raise InvalidCall(
            "HOST: whether the command runs through a shell is the owner's setting "
            f"(run_command_shell is {str(shell).lower()} now); nothing ran."
        )
    argv = _split(text)
    node = _node(arguments.get("node"), sessions, owner_id, client)
    how = runs_as(client, node) if client is not None else set()
    return Command(
        node, text, SHELL + (text,) if shell else argv, shell, _timeout(arguments),
        runs_as="worker" if "worker" in how else ("uid" if how else None),
    )  # fmt: skip


def _text(command: object) -> str:
    if not isinstance(command, str) or not command.strip():
        raise InvalidCall("HOST: 'command' must be the command line to run, as text.")
    if "\0" in command:
        raise InvalidCall("HOST: 'command' may not hold a NUL character.")
    size = len(command.encode("utf-8", "surrogatepass"))
    if size > MAX_COMMAND_BYTES:
        raise InvalidCall(
            f"HOST: 'command' is {size:,} bytes; at most {MAX_COMMAND_BYTES:,} are accepted."
        )
    return command


def _split(text: str) -> tuple[str, ...]:
    """The argv a shell-less run executes; a line a shell could not parse either is refused."""
    try:
        argv = tuple(shlex.split(text))
    except ValueError as e:
        raise InvalidCall(f"HOST: the command can't be split into arguments: {e}.") from None
    if not argv:
        raise InvalidCall("HOST: 'command' names no program to run.")
    return argv


def _node(node: object, sessions: SessionFactory, owner_id: int, client: redis.Redis | None) -> str:
    if not isinstance(node, str) or not naming.is_node_name(node) or node in RUNNERS:
        raise InvalidCall(
            "HOST: 'node' must name a node as list_nodes gives it (a-z, 0-9 and '-', "
            "at most 64 characters; not a shared runner)."
        )
    usable_node(sessions, client, owner_id, node)
    try:
        live = client is not None and node_is_live(client, node)
    except redis.RedisError as e:
        raise BackendUnavailable("Redis can't be reached to see which nodes run.") from e
    if live:
        return node
    if client is not None:
        raise NodeOffline(
            f"HOST: the node '{node}' is not running a worker now, so nothing can run there; "
            "list_nodes shows its health."
        )
    return node


def _timeout(arguments: dict[str, Any]) -> int | None:
    timeout = arguments.get("timeout")
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int)
        or not 1 <= timeout <= MAX_COMMAND_TIMEOUT_SECONDS
    ):
        raise InvalidCall(
            f"HOST: 'timeout' must be whole seconds from 1 to {MAX_COMMAND_TIMEOUT_SECONDS}."
        )
    return timeout


def _shell(sessions: SessionFactory, owner_id: int) -> bool:
    with sessions() as session:
        owner = session.get(Owner, owner_id)
    return owner is not None and owner.run_command_shell

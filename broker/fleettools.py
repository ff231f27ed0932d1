"""The fleet tools agents call: list_nodes shows the managed nodes, run_command runs one
command on one of them as a run (the same rows, queue, stream, timeout and cancel as a
script's)."""

from __future__ import annotations

from typing import Any

from broker.context import RunStarted, ToolContext
from broker.errors import InvalidCall
from broker.fleet import node_page
from broker.registry import Tool
from broker.tiers import Tier
from relay import naming
from relay.errors import BackendUnavailable
from store.limits import LIST_NODES_SHOWN, MAX_COMMAND_BYTES, MAX_COMMAND_TIMEOUT_SECONDS

# What list_nodes leaves out of the nodes API's view: the package hashes each holds, which
# say nothing an agent acts on and would fill its context.
LEFT_OUT = ("hashes",)


def list_nodes(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The owner's nodes and the shared runners, LIST_NODES_SHOWN at a time by name: what
    each serves, its health, its last heartbeat; `after` asks for those past a name."""
    after = arguments.get("after")
    if set(arguments) - {"after"} or (
        after is not None and not (isinstance(after, str) and naming.is_node_name(after))
    ):
        raise InvalidCall(
            'HOST: list_nodes takes no arguments, or {"after": NAME} for the nodes after '
            "NAME (the next_after of the list before)."
        )
    if context.redis is None:
        raise BackendUnavailable("The fleet's heartbeats can't be read here (no Redis).")
    found = node_page(context.sessions, context.redis, context.owner_id, after, LIST_NODES_SHOWN)
    nodes = [
        {key: value for key, value in view.items() if key not in LEFT_OUT} for view in found.views
    ]
    shown: dict[str, Any] = {"nodes": nodes, "count": len(nodes), "total": found.total}
    shown["next_after"] = nodes[-1]["name"] if found.more else None
    if found.more:
        shown["note"] = (
            f"{len(nodes)} of {found.total} shown, by name; call list_nodes with "
            f'{{"after": "{nodes[-1]["name"]}"}} for the next ones.'
        )
    return shown


def run_command(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any] | RunStarted:
    """Hand the planned command to the dispatcher; node and argv were checked before the
    policy (broker/commands.py)."""
    return context.dispatcher.dispatch(context)


TOOLS = (
    Tool(
        "list_nodes",
        Tier.READ,
        "Lists the managed nodes you may use and the shared runners (spark, sandbox): what "
        "each serves (queues, features such as docker or kvm), its health (alive; not_serving: "
        "its workers beat but can't take runs, each worker's reason says why; stale: its "
        "heartbeats stopped; down: none heard), its last heartbeat and how it runs scripts "
        "(runs_as: uid, a user of each run's own; worker, the worker's user). run_command and "
        f"node skills need a node that is alive. At most {LIST_NODES_SHOWN} by name a call, "
        "with total (how many in all) and next_after: when it is not null, call again with "
        '{"after": next_after} for the next ones.',
        {
            "type": "object",
            "properties": {
                "after": {
                    "type": "string",
                    "maxLength": 64,
                    "description": "Show the nodes after this name (the last call's next_after).",
                }
            },
            "additionalProperties": False,
        },
        list_nodes,
    ),
    Tool(
        "run_command",
        Tier.DESTRUCTIVE,
        "Runs one command on one node (as a user of the run's own, or as the node worker's "
        "user on a node that runs scripts so), after the owner approves that exact command "
        "on that node. The command is split like a shell would split it "
        "but runs without a shell (no pipes, globs or $VARIABLES) unless the owner allows a "
        "shell. Returns exit_code, stdout and stderr; output streams at "
        "/api/runs/<run_id>/events.",
        {
            "type": "object",
            "properties": {
                "node": {"type": "string", "description": "The node, as list_nodes names it."},
                "command": {
                    "type": "string",
                    "maxLength": MAX_COMMAND_BYTES,
                    "description": "The command line, such as `systemctl status nginx`.",
                },
                "timeout": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_COMMAND_TIMEOUT_SECONDS,
                    "description": "Seconds before it is stopped (default: the run timeout).",
                },
            },
            "required": ["node", "command"],
            "additionalProperties": False,
        },
        run_command,
    ),
)

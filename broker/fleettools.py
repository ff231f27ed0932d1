"""The fleet tools agents call: list_nodes shows the managed nodes, run_command runs one
command on one of them as a run (the same rows, queue, stream, timeout and cancel as a
script's)."""

from __future__ import annotations

from typing import Any

from broker.context import RunStarted, ToolContext
from broker.errors import InvalidCall
from broker.fleet import node_views
from broker.registry import Tool
from broker.tiers import Tier
from relay.errors import BackendUnavailable
from store.limits import MAX_COMMAND_BYTES, MAX_COMMAND_TIMEOUT_SECONDS

# What list_nodes leaves out of the nodes API's view: the package hashes each holds, which
# say nothing an agent acts on and would fill its context.
LEFT_OUT = ("hashes",)


def list_nodes(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Every node of the fleet: what it serves, its health and its last heartbeat."""
    if arguments:
        raise InvalidCall("HOST: list_nodes takes no arguments.")
    if context.redis is None:
        raise BackendUnavailable("The fleet's heartbeats can't be read here (no Redis).")
    nodes = [
        {key: value for key, value in view.items() if key not in LEFT_OUT}
        for view in node_views(context.sessions, context.redis)
    ]
    return {"nodes": nodes, "count": len(nodes)}


def run_command(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any] | RunStarted:
    """Hand the planned command to the dispatcher; node and argv were checked before the
    policy (broker/commands.py)."""
    return context.dispatcher.dispatch(context)


TOOLS = (
    Tool(
        "list_nodes",
        Tier.READ,
        "Lists the managed nodes: what each serves (queues, features such as docker or kvm), "
        "its health (alive, stale: its heartbeats stopped, down: none heard) and its last "
        "heartbeat. run_command and node skills need a node that is alive.",
        {"type": "object", "properties": {}, "additionalProperties": False},
        list_nodes,
    ),
    Tool(
        "run_command",
        Tier.DESTRUCTIVE,
        "Runs one command on one node as the node worker's user, after the owner approves "
        "that exact command on that node. The command is split like a shell would split it "
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

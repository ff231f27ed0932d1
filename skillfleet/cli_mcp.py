"""`skillfleet mcp`: skillfleet's tools for an MCP host that starts a command (stdio)."""

from __future__ import annotations

import click


@click.command("mcp")
def mcp() -> None:
    """Serve the owner's skills and tools to an MCP host over stdio (a client of the API:
    SKILLFLEET_URL and SKILLFLEET_TOKEN)."""
    raise click.ClickException("The MCP gateway is not part of this build yet.")

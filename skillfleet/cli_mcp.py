"""`skillfleet mcp`: skillfleet's tools for an MCP host that starts a command (stdio).

The same gateway as the API's `/mcp` (api/mcp/gateway.py), reaching the API over HTTP at
SKILLFLEET_URL with SKILLFLEET_TOKEN: it never touches the database or Redis, so a host on
another machine needs only the URL and an agent token. The process is one MCP session, and so
one chat: `mcp-<client>-<random>`.
"""

from __future__ import annotations

import click

from skillfleet.client import TOKEN_HINT
from store.settings import ClientSettings


@click.command("mcp")
def mcp() -> None:
    """Serve the owner's skills and tools to an MCP host over stdio (a client of the API:
    SKILLFLEET_URL and SKILLFLEET_TOKEN)."""
    settings = ClientSettings.from_env()
    if not settings.token:
        raise click.ClickException(f"No token: {TOKEN_HINT}, then start it again.")
    # Imported here: the MCP SDK and the gateway take a second to import, which no other
    # command should pay.
    import anyio

    from api.mcp.rest import RestError
    from skillfleet.mcpstdio import serve

    try:
        anyio.run(serve, settings)
    except RestError as e:
        raise click.ClickException(f"{e.message} ({settings.url})") from None

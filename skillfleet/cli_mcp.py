"""`skillfleet mcp`: skillfleet's tools for an MCP host that starts a command (stdio).

The same gateway as the API's `/mcp` (api/mcp/gateway.py), reaching the API over HTTP at
SKILLFLEET_URL with SKILLFLEET_TOKEN: it never touches the database or Redis, so a host on
another machine needs only the URL and an agent token. The process is one MCP session, and so
one chat: `mcp-<client>-<random>`.
"""

from __future__ import annotations

import secrets
from typing import Any

import anyio
import click
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from api.mcp.gateway import Caller, Gateway, client_name
from api.mcp.rest import Rest, RestError, make_client
from skillfleet.client import TOKEN_HINT
from store.settings import ClientSettings


@click.command("mcp")
def mcp() -> None:
    """Serve the owner's skills and tools to an MCP host over stdio (a client of the API:
    SKILLFLEET_URL and SKILLFLEET_TOKEN)."""
    settings = ClientSettings.from_env()
    if not settings.token:
        raise click.ClickException(f"No token: {TOKEN_HINT}, then start it again.")
    try:
        anyio.run(serve, settings)
    except RestError as e:
        raise click.ClickException(f"{e.message} ({settings.url})") from None


async def serve(settings: ClientSettings) -> None:
    """Check the URL and token once, then serve MCP on stdin and stdout until the host leaves."""
    headers = {"Authorization": f"Bearer {settings.token}", "User-Agent": "skillfleet-mcp"}
    session = secrets.token_hex(8)
    async with make_client(settings.url) as http:
        rest = Rest(http, headers)
        await rest.tools()  # a wrong URL or token fails here, with the API's words

        def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
            return Caller(rest, f"mcp-{client_name(ctx)}-{session}")

        server = Gateway(caller_of, settings.mcp_approval_wait).server
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

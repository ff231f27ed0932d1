"""The stdio MCP server behind `skillfleet mcp` (skillfleet/cli_mcp.py): the gateway of the
API's `/mcp`, reaching the API over HTTP as a client of its REST routes."""

from __future__ import annotations

import secrets
import sys
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from api.mcp.gateway import Caller, Gateway, client_name
from api.mcp.rest import Rest, make_client
from store.settings import ClientSettings


async def serve(settings: ClientSettings, owner_warning: str = "") -> None:
    """Check the URL and token once, then serve MCP on stdin and stdout until the host leaves;
    `owner_warning` goes to standard error when the token is an owner's."""
    headers = {"Authorization": f"Bearer {settings.token}", "User-Agent": "skillfleet-mcp"}
    session = secrets.token_hex(8)
    async with make_client(settings.url) as http:
        rest = Rest(http, headers)
        await rest.tools()  # a wrong URL or token fails here, with the API's words
        if owner_warning and await rest.is_owner_token():
            print(owner_warning, file=sys.stderr, flush=True)  # stdout carries MCP

        def caller_of(ctx: ServerRequestContext[Any, Any]) -> Caller:
            return Caller(rest, f"mcp-{client_name(ctx)}-{session}")

        server = Gateway(caller_of, settings.mcp_approval_wait, connected=True).server
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

"""`skillfleet mcp`: skillfleet's tools for an MCP host that starts a command (stdio).

The same gateway as the API's `/mcp` (api/mcp/gateway.py), reaching the API over HTTP at
SKILLFLEET_URL with SKILLFLEET_TOKEN: it never touches the database or Redis, so a host on
another machine needs only the URL and an agent token. The process is one MCP session, and so
one chat: `mcp-<client>-<random>`.
"""

from __future__ import annotations

import click

from store.settings import ClientSettings

# What an MCP host is given: an agent token, which calls tools and can never answer an
# approval or change a skill; the owner's token would let the host do what only the owner may.
AGENT_TOKEN_HINT = (
    "give it an agent token, not the owner's: SKILLFLEET_TOKEN=$SKILLFLEET_AGENT_TOKEN (the "
    "`agent token` `skillfleet up` printed), or a new one from "
    "`skillfleet tokens create --owner <you> --role agent --label <host>`"
)
OWNER_TOKEN_WARNING = (
    "skillfleet mcp: SKILLFLEET_TOKEN is an owner token. Give an MCP host an agent token "
    "instead (`skillfleet tokens create --owner <you> --role agent --label <host>`): the "
    "host then calls tools as an agent and can never act as the owner."
)


@click.command("mcp")
def mcp() -> None:
    """Serve the owner's skills and tools to an MCP host over stdio (a client of the API:
    SKILLFLEET_URL, and SKILLFLEET_TOKEN set to an agent token, not the owner's)."""
    settings = ClientSettings.from_env()
    if not settings.token:
        raise click.ClickException(f"No token: {AGENT_TOKEN_HINT}; then start it again.")
    # Imported here: the MCP SDK and the gateway take a second to import, which no other
    # command should pay.
    import anyio

    from api.mcp.rest import RestError
    from skillfleet.heap import freeze_startup_heap
    from skillfleet.mcpstdio import serve

    freeze_startup_heap()
    try:
        anyio.run(serve, settings, OWNER_TOKEN_WARNING)
    except RestError as e:
        hint = f" ({AGENT_TOKEN_HINT})" if e.http_status in (401, 403) else ""
        raise click.ClickException(f"{e.message} ({settings.url}){hint}") from None

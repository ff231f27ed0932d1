"""Real MCP clients against a served API over streamable HTTP: the official SDK's, and
fastmcp's with the Skills extension."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import fastmcp
import httpx2
from fastmcp.skills import SkillsClientExtension
from fleet import Fleet
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

T = TypeVar("T")


def http_client(token: str | None, headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(120.0))


def mcp_client(
    running: Fleet, token: str, name: str = "test-host", mode: str = "auto", **options: Any
) -> Client:
    """The SDK's client of the fleet's /mcp with `token`, introducing itself as `name`."""
    transport = streamable_http_client(f"{running.url}/mcp", http_client=http_client(token))
    info = Implementation(name=name, version="1.0")
    return Client(transport, client_info=info, mode=mode, **options)  # type: ignore[arg-type]


def skills_client(running: Fleet, token: str, mode: str = "auto") -> fastmcp.Client[Any]:
    """fastmcp's client of the fleet's /mcp with `token`, opted into the Skills extension."""
    return fastmcp.Client(
        f"{running.url}/mcp",
        auth=token,
        mode=mode,  # type: ignore[arg-type]
        extensions=[SkillsClientExtension()],
        client_info=Implementation(name="skills-host", version="1.0"),
    )


def using(client: Any, scenario: Callable[[Any], Awaitable[T]]) -> T:
    """Run `scenario` with `client` connected, on an event loop of its own."""

    async def connected() -> T:
        async with client:
            return await scenario(client)

    return asyncio.run(connected())

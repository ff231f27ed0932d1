"""Real MCP clients against a served API: the official SDK's, over streamable HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
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


def using(client: Client, scenario: Callable[[Client], Awaitable[T]]) -> T:
    """Run `scenario` with `client` connected, on an event loop of its own."""

    async def connected() -> T:
        async with client:
            return await scenario(client)

    return asyncio.run(connected())

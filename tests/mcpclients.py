"""Real MCP clients against a served API over streamable HTTP: the official SDK's, and
fastmcp's with the Skills extension."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import fastmcp
import httpx
import httpx2
from conftest import TLS
from fastmcp.skills import SkillsClientExtension
from fleet import Fleet
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from store.db import transaction
from store.tokens import Role, create_token

T = TypeVar("T")


def new_tokens(running: Fleet) -> tuple[str, str]:
    """A fresh owner's token and one of its agent tokens; the fleet's nodes are its too."""
    name = f"owner-{uuid.uuid4().hex[:6]}"
    with transaction(running.services.sessions) as session:
        owner = create_token(session, name, Role.OWNER)
        agent = create_token(session, name, Role.AGENT)
    running.share_nodes_with(name)
    return owner, agent


@dataclass
class McpOwner:
    """A fresh owner of a served fleet, with an agent token for its MCP clients."""

    running: Fleet
    token: str
    agent: str

    @classmethod
    def create(cls, running: Fleet) -> Self:
        return cls(running, *new_tokens(running))

    def rest(self) -> httpx.Client:
        """The owner's REST client of the fleet's API."""
        headers = {"Authorization": f"Bearer {self.token}"}
        return httpx.Client(verify=TLS, base_url=self.running.url, headers=headers, timeout=60)


def http_client(
    token: str | None,
    headers: dict[str, str] | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> httpx2.AsyncClient:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return httpx2.AsyncClient(headers=sent, timeout=httpx2.Timeout(120.0), transport=transport)


class Recorded(httpx2.AsyncBaseTransport):
    """A client's requests as sent, kept: their headers and JSON-RPC messages."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.sent: list[tuple[httpx2.Headers, Any]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        self.sent.append((request.headers, json.loads(body) if body else None))
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def request(self, method: str) -> tuple[httpx2.Headers, dict[str, Any]]:
        """The last request of `method` sent, with its headers."""
        return next(
            (headers, message)
            for headers, message in reversed(self.sent)
            if isinstance(message, dict) and message.get("method") == method
        )


def mcp_client(
    running: Fleet,
    token: str,
    name: str = "test-host",
    mode: str = "auto",
    via: httpx2.AsyncBaseTransport | None = None,
    **options: Any,
) -> Client:
    """The SDK's client of the fleet's /mcp with `token`, introducing itself as `name`
    (through the transport `via`, when given)."""
    client = http_client(token, transport=via)
    transport = streamable_http_client(f"{running.url}/mcp", http_client=client)
    info = Implementation(name=name, version="1.0")
    return Client(transport, client_info=info, mode=mode, **options)  # type: ignore[arg-type]


def stdio_env(running: Fleet, token: str | None) -> dict[str, str]:
    """`skillfleet mcp`'s environment: only the API's address and a token (no database, no
    Redis)."""
    env = {k: v for k, v in running.env.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.pop("SKILLFLEET_DATA_DIR", None)
    if token is not None:
        env["SKILLFLEET_TOKEN"] = token
    return env


def stdio_client(
    running: Fleet, token: str, name: str = "Claude Desktop", **options: Any
) -> Client:
    """The SDK's client of `skillfleet mcp`, started as a host starts it."""
    command = StdioServerParameters(
        command=sys.executable, args=["-m", "skillfleet", "mcp"], env=stdio_env(running, token)
    )
    return Client(command, client_info=Implementation(name=name, version="1"), **options)


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

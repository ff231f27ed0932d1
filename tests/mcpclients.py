"""Real MCP clients against a served API over streamable HTTP: the official SDK's, and
fastmcp's with the Skills extension."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import fastmcp
import httpx
import httpx2
from fastmcp.skills import SkillsClientExtension
from fleet import Fleet
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

from store.db import transaction
from store.tokens import Role, create_token

T = TypeVar("T")


def new_tokens(running: Fleet) -> tuple[str, str]:
    """A fresh owner's token and one of its agent tokens."""
    name = f"owner-{uuid.uuid4().hex[:6]}"
    with transaction(running.services.sessions) as session:
        owner = create_token(session, name, Role.OWNER)
        agent = create_token(session, name, Role.AGENT)
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
        return httpx.Client(base_url=self.running.url, headers=headers, timeout=60)


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

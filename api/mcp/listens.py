"""How many MCP `subscriptions/listen` streams one token holds open on `/mcp`, across every API
process: each holds a lease in the token's set in Redis (relay/slots.py), renewed while the
stream stays open (api/asgi.py) and released when it ends. Past SKILLFLEET_MCP_LISTEN_LIMIT a
listen is refused before the MCP SDK sees it, so one client can't hold streams without end.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from relay import naming, slots
from relay.hub import OUTAGES

log = structlog.get_logger(__name__)


class ListenSlots:
    """The listen streams this process serves, by token digest; `client_of` gives the
    process's asynchronous Redis client (made when the server starts)."""

    def __init__(self, limit: int, client_of: Callable[[], Any]) -> None:
        self.limit = limit
        self.client_of = client_of
        self.held: set[tuple[str, str]] = set()  # (token digest, slot)

    async def take(self, digest: str) -> str | None:
        """One of the token's listen slots (its id), or None when it holds them all; an error
        of OUTAGES when Redis can't be reached."""
        slot = await slots.take_in(self.client_of(), naming.listen_slots(digest), self.limit)
        if slot is not None:
            self.held.add((digest, slot))
        return slot

    async def release(self, digest: str, slot: str) -> None:
        self.held.discard((digest, slot))
        try:
            await slots.release_in(self.client_of(), naming.listen_slots(digest), slot)
        except OUTAGES as e:  # the lease lapses by itself
            log.warning("listen slot not released", error=repr(e))

    async def renew(self) -> None:
        """Extend the leases of every listen stream this process serves."""
        held = [(naming.listen_slots(digest), slot) for digest, slot in self.held]
        if held:
            await slots.renew_in(self.client_of(), held)

"""Small request bodies, read on the event loop before Flask runs the view.

a2wsgi hands a body to the request's thread one ASGI message at a time, each through a hop from
the thread to the event loop and back, and uvicorn reads no more of the socket until the app took
what came (its flow control): a body went over in lockstep, a 1 MiB file sent back by a node's
agent in some sixteen such hops (about 2 ms of its 3.7 ms in the view), a JSON body in one.
A body whose Content-Length is at most PREREAD_MAX_BYTES is read here instead, as it arrives,
and the view reads it from memory (`wsgi.input`, api/asgi.py `_input_terminated`).

Bodies of unknown length or larger ones go to the thread as before, as do all of them while the
process holds PREREAD_BUDGET_BYTES of read bodies, so memory stays bounded however many clients
send at once. A client that leaves before its body is in gets no answer and costs no thread; one
whose body never comes holds a coroutine until the server's body time limit (relay/fenced/)
closes its connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from store.limits import MIB

PREREAD_MAX_BYTES = 2 * MIB
PREREAD_BUDGET_BYTES = 64 * MIB
# Where the ASGI scope carries a body read here; a2wsgi puts the scope in environ["asgi.scope"].
BODY_KEY = "skillfleet.body"

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]


class BodyBudget:
    """The bytes of read bodies the process holds now, up to `most` (on the event loop only)."""

    def __init__(self, most: int = PREREAD_BUDGET_BYTES) -> None:
        self.most = most
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.most:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


def small_body_length(scope: MutableMapping[str, Any]) -> int | None:
    """The request's Content-Length when it announces a body of 1 to PREREAD_MAX_BYTES bytes."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return None  # the server refuses such a request; whatever it is, not read here
            return length if 0 < length <= PREREAD_MAX_BYTES else None
    return None


async def read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client went away before it was all in."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if chunk:
            parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)

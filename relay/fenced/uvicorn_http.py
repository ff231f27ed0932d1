"""uvicorn's httptools protocol with time limits on a request's headers and body.

uvicorn has no limit on how long a client may take to send a request's headers or body, so a
client trickling them (slowloris), or connecting and sending nothing, keeps its socket for ever,
and one whose body never comes holds a coroutine (api/bodyread.py), or a Flask thread for a body
larger than the event loop reads itself. `RequestsInTime` closes a connection whose
request line and headers are not all in within SKILLFLEET_HEADER_TIMEOUT seconds of its start
(or of its next request's first byte), or whose body goes that long without a byte. A connection
that ends also ends every response still open on it, not only the newest (a client that sent a
second request behind a stream).

Private API used: uvicorn's `HttpToolsProtocol` is extended through its parser callbacks
(`on_message_begin`, `on_headers_complete`, `on_body`, `on_message_complete`) and reads its
`cycle`, `flow.read_paused` and a cycle's `response_complete`, `disconnected` and
`message_event`. Verified with uvicorn 0.55; pinned to `>=0.55,<0.56`.
`SKILLFLEET_FENCED_UVICORN=false` serves with uvicorn's own httptools protocol, without these
limits (tests/api/test_live_streams.py's slow-client tests then fail).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from store.settings import Settings


class RequestsInTime(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose requests take over `seconds`."""

    seconds = 10.0
    _due: asyncio.TimerHandle | None = None
    _open_cycles: list[Any] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._open_cycles = []
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        self._arm()  # now for the body, until the message is complete
        if self._open_cycles is not None and self.cycle is not None:
            self._open_cycles = [c for c in self._open_cycles if not c.response_complete]
            self._open_cycles.append(self.cycle)

    def on_body(self, body: bytes) -> None:
        self._disarm()
        super().on_body(body)
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        for cycle in self._open_cycles or ():
            if cycle is not self.cycle and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._due is None:
            self._due = self.loop.call_later(self.seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None

    def _too_slow(self) -> None:
        self._due = None
        if self.flow.read_paused:  # the app has not taken what came yet: the wait is ours
            self._arm()
        elif not self.transport.is_closing():
            self.transport.close()


def headers_in_time(seconds: float) -> type[RequestsInTime]:
    """The protocol with a limit of `seconds`."""
    return type("RequestsInTime", (RequestsInTime,), {"seconds": seconds})


def http_protocol(settings: Settings) -> type[asyncio.Protocol] | str:
    """What uvicorn's `http` option gets: the protocol above, or uvicorn's own when turned off."""
    if settings.fenced_uvicorn:
        return headers_in_time(settings.header_timeout)
    return "httptools"

"""Hand-off to the live tier: what stays open after Flask accepted a request.

An SSE stream or a `?wait=` long-poll passes Flask's whole request path (authentication, hooks,
argument checks, errors) like any request; the view then takes one of the token's stream slots
(429 `too_many_streams` past its limit) and hands what remains (following a stream, waiting for
a call) to `hand_off`. Under the API's ASGI server (api/asgi.py) that is all the view does: the
response's body comes from the asynchronous tier, which costs a coroutine, not a thread. Under a
plain WSGI server (Flask's test client, a development server) the same body is produced in the
request's thread, on an event loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import redis
from flask import Response, request, stream_with_context

from api.errors import ApiError
from api.livejobs import Job, WaitCall, kind_of
from api.livestreams import CallNews, LiveContext, body_of
from api.metrics import SSE_STREAMS_OPEN
from api.services import Services, services
from relay import slots
from relay.hub import StreamHub
from store.tokens import token_digest

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
RETRY_AFTER_SECONDS = 5


@dataclass(frozen=True)
class Handoff:
    job: Job
    token: str  # the token's digest: what revoking it and its slot limit key on
    slot: str


class Threads:
    """The ASGI tier's request threads in this process, and how many serve a request now."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.busy = 0
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        with self._lock:
            self.busy += 1
        try:
            yield
        finally:
            with self._lock:
                self.busy -= 1

    def spare(self) -> bool:
        """At most half of them serve a request (the asking one among them)."""
        return self.busy * 2 <= self.size


@dataclass
class Pickup:
    """Where a view leaves its hand-off for the ASGI tier (one per request)."""

    handoff: Handoff | None = None
    threads: Threads | None = None  # the tier's request threads


# Set by the ASGI tier around each request it passes to Flask; the view's thread runs in a copy
# of the request's context, so it finds the same Pickup.
PICKUP: contextvars.ContextVar[Pickup | None] = contextvars.ContextVar("pickup", default=None)


def threads_to_spare() -> bool:
    """Whether a wait may go on in its request's thread rather than be handed off: under the
    ASGI tier, while at most half of the process's request threads serve a request. A hand-off
    costs more CPU than a thread nobody needs, and a thread that waits on finds out within a
    grace when others need it. A plain WSGI server waits in the thread anyway (`_wait_here`)."""
    pickup = PICKUP.get()
    return pickup is not None and pickup.threads is not None and pickup.threads.spare()


def hand_off(job: Job, instead: Any = None) -> Response | Any:
    """The response of a view whose body the live tier produces (see the module's text).

    With `instead`, a request that can't take a slot (the token's limit, Redis away) is answered
    `instead` at once rather than refused: a call already made must not look like one refused.
    """
    found = services()
    token = token_digest(_bearer())
    try:
        slot = _take_slot(found, token)
    except (ApiError, redis.RedisError):
        if instead is None:
            raise
        return instead
    handoff = Handoff(job, token, slot)
    mimetype = "application/json" if isinstance(job, WaitCall) else "text/event-stream"
    headers = {} if isinstance(job, WaitCall) else SSE_HEADERS
    pickup = PICKUP.get()
    if pickup is not None:
        pickup.handoff = handoff
        return Response(iter(()), mimetype=mimetype, headers=headers)
    if isinstance(job, WaitCall):  # answered (or failed) before the response starts
        return Response(_wait_here(found, handoff), mimetype=mimetype)
    body = _in_this_thread(found, handoff)
    return Response(stream_with_context(body), mimetype=mimetype, headers=headers)


def _bearer() -> str:
    _scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip()


def _take_slot(found: Services, token: str) -> str:
    limit = found.settings.stream_limit
    slot = slots.take(found.redis, token, limit)  # Redis away: 503, as every Redis route
    if slot is None:
        raise ApiError(
            429,
            "too_many_streams",
            f"This token already holds {limit} open streams and waits; close one first.",
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )
    return slot


def _in_this_thread(found: Services, handoff: Handoff) -> Iterator[bytes]:
    """The hand-off's body for a plain WSGI server: produced on an event loop of its own in a
    helper thread, handed over chunk by chunk; closing the response stops it."""
    chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    loop = asyncio.new_event_loop()
    task = loop.create_task(_produce(found, handoff, chunks))
    producer = threading.Thread(target=_run_until_done, args=(loop, task), daemon=True)
    gauge = SSE_STREAMS_OPEN.labels(kind_of(handoff.job))
    gauge.inc()
    producer.start()
    ended = False
    try:
        while (chunk := chunks.get()) is not None:
            yield chunk
        ended = True  # the producer is closing its hub: a cancel now would cut that short
    finally:
        gauge.dec()
        try:
            slots.release_sync(found.redis, handoff.token, handoff.slot)
        except redis.RedisError:
            pass  # the lease lapses by itself
        if not ended:  # the client went away first
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(task.cancel)
        producer.join(timeout=10)


def _wait_here(found: Services, handoff: Handoff) -> bytes:
    """A wait's answer for a plain WSGI server, waited for in the request's thread; a failure
    goes to Flask's error handlers like any other."""
    try:
        return asyncio.run(_collect(found, handoff))
    finally:
        try:
            slots.release_sync(found.redis, handoff.token, handoff.slot)
        except redis.RedisError:
            pass  # the lease lapses by itself


async def _collect(found: Services, handoff: Handoff) -> bytes:
    hub = StreamHub(found.settings)
    await hub.start()
    try:
        return b"".join(
            [chunk async for chunk in body_of(handoff.job, LiveContext(hub, found, CallNews(hub)))]
        )
    finally:
        await hub.stop()


def _run_until_done(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> None:
    """Run `task`, then cancel and await what it left running (a hub's read, when its stop
    was cut short), as `asyncio.run` does, before closing the loop."""
    try:
        loop.run_until_complete(task)
    except asyncio.CancelledError:
        pass  # the client went away
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for leftover in left:
                leftover.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _produce(
    found: Services, handoff: Handoff, chunks: queue.SimpleQueue[bytes | None]
) -> None:
    hub = StreamHub(found.settings)
    await hub.start()
    try:
        async for chunk in body_of(handoff.job, LiveContext(hub, found, CallNews(hub))):
            chunks.put(chunk)
    finally:
        chunks.put(None)
        await hub.stop()

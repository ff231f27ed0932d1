"""The API as an ASGI application: Flask for every request, an asynchronous tier for what stays
open (SSE streams, `?wait=` long-polls).

Every request goes through the Flask app (on a pool of threads, api/wsgibridge.py), so each
passes the same authentication, hooks, argument checks and error handling. A view that hands
off (api/live.py) returns at once; its response's headers go out as Flask made them, and its
body is produced here, on the event loop, from the process's stream hub. The thread is free
again as soon as the view returned, so thousands of open streams cost coroutines and small
queues, not request workers.

Each open stream holds a slot of its token (relay/slots.py; its lease renewed here, as are those
of `/mcp`'s listen streams, api/mcp/listens.py) and ends
when the first of these happens: the body ends, the client goes away, a chunk can't be written
within the send timeout (a client that doesn't read), the stream's absolute time limit passes,
or its token is revoked (heard through the tokens generation, and checked again every
`SKILLFLEET_STREAM_RECHECK` seconds).

`/mcp` is the MCP gateway (api/mcp/): it checks its own requests' origin and token, then
serves MCP by calling this same app in-process with the caller's token. The OAuth paths MCP
hosts sign in through (api/oauth/) are the MCP SDK's handlers; their consent page is Flask's.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
from flask import Flask
from sqlalchemy import or_, select

from api import create_app
from api.bodyread import BODY_KEY, BodyBudget, read_body, small_body_length
from api.live import PICKUP, Handoff, Pickup, Threads
from api.livejobs import WaitCall, kind_of
from api.livestreams import CallNews, LiveContext, body_of
from api.mcp.gateway import CallKey
from api.mcp.http import PATH as MCP_PATH
from api.mcp.http import McpEndpoint
from api.mcp.listens import ListenSlots
from api.metrics import SSE_STREAMS_OPEN
from api.oauth.provider import Provider
from api.oauth.routes import OAuthEndpoints
from api.oauth.urls import PATHS as OAUTH_PATHS
from api.services import Services
from api.wsgibridge import WsgiBridge
from relay import naming, slots
from relay.connections import database_number
from relay.hub import OUTAGES, StreamHub, async_client
from store.models import ApiToken, utcnow
from store.settings import Settings

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

log = structlog.get_logger(__name__)
CANCEL_SECONDS = 5.0  # a stream's tasks end this soon after being cancelled, or are left

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def create_asgi_app(settings: Settings | None = None) -> LiveTier:
    """The API for `settings` (read from the environment when not given), served by ASGI."""
    return LiveTier(create_app(settings))


@dataclass(eq=False)
class _Open:
    """One stream or wait being served: what ends it early."""

    handoff: Handoff
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    why: str = ""
    started: bool = False  # its response's headers went out


class LiveTier:
    """An ASGI application: the Flask app, and the live tier behind its hand-offs."""

    def __init__(self, app: Flask) -> None:
        self.flask = app
        self.services: Services = app.extensions["skillfleet"]
        settings = self.services.settings
        self.threads = Threads(settings.api_threads)
        self.bodies = BodyBudget()  # small bodies read on the loop (api/bodyread.py)
        self.wsgi = WsgiBridge(_input_terminated(app, self.threads), settings.api_threads)
        self.hub: StreamHub | None = None
        self.calls: CallNews | None = None
        self.client: Any = None  # redis.asyncio, made on the server's loop at start-up
        self.open: set[_Open] = set()
        self._chores: list[asyncio.Task[None]] = []
        # /mcp: the MCP gateway, a client of this very app (api/mcp/).
        listens = ListenSlots(settings.mcp_listen_limit, lambda: self.client)
        self.mcp = McpEndpoint(
            self, settings.cors_origins, settings.mcp_approval_wait, listens, settings.public_url
        )
        # OAuth for MCP hosts (api/oauth/): its endpoints are the MCP SDK's handlers.
        self.oauth = OAuthEndpoints(Provider(app), settings.public_url)
        self.mcp.gateway.relay_cancel = self._relay_mcp_cancel
        db = database_number(self.services.redis)
        self._revocations = naming.generations_channel(db)
        self._mcp_cancels = naming.mcp_cancels_channel(db)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope["path"] == MCP_PATH:
            await self.mcp(scope, receive, send)
        elif scope["type"] == "http" and scope["path"] in OAUTH_PATHS:
            await self.oauth(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        else:
            await self.wsgi(scope, receive, send)

    # -- requests ------------------------------------------------------------------

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        pickup = Pickup(threads=self.threads)
        held: list[Message] = []

        async def from_flask(message: Message) -> None:
            if pickup.handoff is not None and message["type"] == "http.response.start":
                if message["status"] == 200:
                    message["headers"] = [
                        (k, v) for k, v in message["headers"] if k != b"content-length"
                    ]
                    held.append(message)
                    return
                # A hook turned the answer into something else: it goes out as Flask made it.
            elif held:
                return  # the hand-off's (empty) body; the live tier sends the real one
            await send(message)

        reset = PICKUP.set(pickup)
        # A small body is read here first (api/bodyread.py); its bytes count until Flask is done.
        length = small_body_length(scope)
        taken = length if length is not None and self.bodies.take(length) else 0
        try:
            if taken:
                body = await read_body(receive)
                if body is None:
                    return  # the client left before its body was in: nobody to answer
                scope = {**scope, BODY_KEY: body}
            await self.wsgi(scope, receive, from_flask)
        finally:
            self.bodies.give(taken)
            PICKUP.reset(reset)
        if pickup.handoff is None:
            return
        if held:
            await self._serve(pickup.handoff, held[0], receive, send)
        else:
            await self._release(pickup.handoff)

    async def _serve(self, handoff: Handoff, start: Message, receive: Receive, send: Send) -> None:
        """Send the hand-off's response: its headers as Flask made them, its body from here.

        A stream's headers go out at once (the client knows it is connected); a wait's with its
        answer, so a failure while waiting can still be answered as an error.
        """
        settings = self.services.settings
        limit = settings.stream_send_timeout
        serving = _Open(handoff)
        if isinstance(handoff.job, WaitCall):
            body = self._answer(serving, start, send, limit)
        else:
            body = self._pump(serving, start, send, limit)
        self.open.add(serving)
        gauge = SSE_STREAMS_OPEN.labels(kind_of(handoff.job))
        gauge.inc()
        pump = asyncio.create_task(body)
        gone = asyncio.create_task(_disconnected(receive))
        stopped = asyncio.create_task(serving.stop.wait())
        try:
            done, _ = await asyncio.wait(
                {pump, gone, stopped},
                timeout=settings.stream_max,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for task in (pump, gone, stopped):
                task.cancel()
            _, stuck = await asyncio.wait({pump, gone, stopped}, timeout=CANCEL_SECONDS)
            if stuck:
                log.error("stream task did not end when cancelled", job=type(handoff.job).__name__)
            self.open.discard(serving)
            gauge.dec()
            await self._release(handoff)
        if gone in done:
            if isinstance(handoff.job, WaitCall) and handoff.job.withdraw:
                await self._withdraw(handoff.job)
            return
        failed = pump.done() and not pump.cancelled() and pump.exception() is not None
        finished = pump in done and not failed and pump.result()
        if not finished:
            if failed:
                log.warning("stream failed", error=repr(pump.exception()))
            why = serving.why or ("failed" if failed else "slow client" if pump.done() else "")
            log.info("stream closed", why=why or "time limit", job=type(handoff.job).__name__)
        with contextlib.suppress(TimeoutError, OSError, RuntimeError):
            async with asyncio.timeout(limit):
                if serving.started:
                    final = {"type": "http.response.body", "body": b"", "more_body": False}
                    await send(final)
                elif isinstance(handoff.job, WaitCall):  # nothing went out: say it failed
                    await send(_error_start(start))
                    await send({"type": "http.response.body", "body": _UNAVAILABLE})

    async def _pump(self, serving: _Open, start: Message, send: Send, limit: float) -> bool:
        """Send the stream's headers, then its chunks; False when one could not be written
        within `limit` seconds (a client that doesn't read)."""
        assert self.hub is not None
        chunks = body_of(serving.handoff.job, self._context())
        try:
            async with contextlib.aclosing(chunks):  # type: ignore[type-var]
                async with asyncio.timeout(limit):
                    await send(start)
                serving.started = True
                async for chunk in chunks:
                    message = {"type": "http.response.body", "body": chunk, "more_body": True}
                    async with asyncio.timeout(limit):
                        await send(message)
            return True
        except TimeoutError:
            return False

    async def _answer(self, serving: _Open, start: Message, send: Send, limit: float) -> bool:
        """The wait's answer, in one body after its headers."""
        assert self.hub is not None
        chunks = body_of(serving.handoff.job, self._context())
        async with contextlib.aclosing(chunks):  # type: ignore[type-var]
            body = b"".join([chunk async for chunk in chunks])
        try:
            async with asyncio.timeout(limit):
                await send(start)
                serving.started = True
                await send({"type": "http.response.body", "body": body, "more_body": True})
        except TimeoutError:
            return False
        return True

    async def _withdraw(self, job: WaitCall) -> None:
        """The client left while its call waited: a pending approval of the call is withdrawn
        (the row is the truth, so an answer on any process finds it withdrawn)."""
        try:
            await asyncio.to_thread(self.services.broker.withdraw, job.owner_id, job.call_id)
        except Exception as e:  # noqa: BLE001 - the approval then expires as it would have
            log.warning("approval not withdrawn", call_id=job.call_id, error=repr(e))

    def _context(self) -> LiveContext:
        assert self.hub is not None and self.calls is not None
        return LiveContext(self.hub, self.services, self.calls)

    async def _release(self, handoff: Handoff) -> None:
        try:
            await slots.release(self.client, handoff.token, handoff.slot)
        except OUTAGES as e:  # the lease lapses by itself
            log.warning("stream slot not released", error=repr(e))

    # -- the process's chores ----------------------------------------------------

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def start(self) -> None:
        settings = self.services.settings
        self.client = async_client(settings)
        self.hub = StreamHub(settings)
        self.calls = CallNews(self.hub)
        await self.hub.start()
        self._chores = [
            asyncio.create_task(self._renew_leases(), name="renew-leases"),
            asyncio.create_task(self._listen(), name="listen"),
            asyncio.create_task(self._recheck_tokens(), name="recheck-tokens"),
        ]
        await self.mcp.start()

    async def stop(self) -> None:
        await self.mcp.stop()
        for serving in list(self.open):
            serving.why = "shutting down"
            serving.stop.set()
        for chore in self._chores:
            chore.cancel()
        await asyncio.gather(*self._chores, return_exceptions=True)
        if self.hub is not None:
            await self.hub.stop()
            self.hub = None
        await self.client.aclose()

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(slots.LEASE_RENEW_SECONDS)
            held = [(s.handoff.token, s.handoff.slot) for s in self.open]
            try:
                if held:
                    await slots.renew(self.client, held)
                if self.mcp.listens is not None:
                    await self.mcp.listens.renew()
            except Exception as e:  # an outage, a refusal (maxmemory): the next round tries
                log.warning("stream leases not renewed", error=repr(e))

    async def _listen(self) -> None:
        """Hear what other processes publish: a deleted token (the tokens generation's bump,
        relay/generations.py) checks the open streams' tokens; a changed skill or token sends
        MCP clients' watches to look at their skills; an MCP client's cancellation that reached
        another process cancels the call if this one serves it."""
        tokens, skills = naming.tokens_generation(), naming.skills_generation()
        while True:
            try:
                async with self.client.pubsub() as pubsub:
                    await pubsub.subscribe(self._revocations, self._mcp_cancels)
                    await self.check_tokens()  # a deletion may have come before we listened
                    async for message in pubsub.listen():
                        channel, data = message.get("channel"), message.get("data")
                        if not isinstance(data, bytes):
                            continue
                        if channel == self._mcp_cancels.encode():
                            self.mcp.gateway.cancel_served(tuple(json.loads(data)))
                            continue
                        generation = data.decode().partition(" ")[0]
                        if generation in (tokens, skills):
                            self.mcp.wakeup.wake()  # MCP clients' skills may have changed
                        if generation == tokens:
                            await self.check_tokens()
            except Exception as e:  # an outage or a refusal: listen again shortly
                log.warning("other processes not heard", error=repr(e))
                await asyncio.sleep(1)

    async def _relay_mcp_cancel(self, key: CallKey) -> None:
        """An MCP client cancels a call this process doesn't serve: tell every process."""
        try:
            await self.client.publish(self._mcp_cancels, json.dumps(list(key)))
        except Exception as e:  # an outage: the call goes on until it ends or its client leaves
            log.warning("mcp cancellation not relayed", error=repr(e))

    async def _recheck_tokens(self) -> None:
        while True:
            await asyncio.sleep(self.services.settings.stream_recheck)
            await self.check_tokens()

    async def check_tokens(self) -> None:
        """End every open stream whose token no longer exists."""
        tokens = {serving.handoff.token for serving in self.open}
        if not tokens:
            return
        try:
            alive = await asyncio.to_thread(_existing_tokens, self.services, tokens)
        except Exception as e:  # a database outage: the next check tries again
            log.warning("stream tokens not checked", error=str(e))
            return
        for serving in list(self.open):
            token = serving.handoff.token
            if token in tokens and token not in alive:  # one opened meanwhile was not asked
                serving.why = "token revoked"
                serving.stop.set()


_UNAVAILABLE = (
    b'{"code":"service_unavailable","status":503,'
    b'"message":"The wait could not be finished; ask for the call again shortly."}\n'
)


def _error_start(start: Message) -> Message:
    headers = [(k, v) for k, v in start["headers"] if k not in (b"content-type",)]
    headers.append((b"content-type", b"application/json"))
    return {"type": "http.response.start", "status": 503, "headers": headers}


def _input_terminated(app: Flask, threads: Threads) -> WSGIApplication:
    """`app`, told that a request's body ends where the client's does (`wsgi.input_terminated`,
    as WSGI servers that read chunked bodies say it): a2wsgi hands a body over as it arrives,
    chunked or not, so werkzeug reads a chunked body, up to MAX_CONTENT_LENGTH, instead of
    taking a body without Content-Length for an empty one; a body read on the event loop is read
    from memory. `threads` counts it while it runs."""

    def terminated(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        environ["wsgi.input_terminated"] = True
        body = environ.get("asgi.scope", {}).get(BODY_KEY)
        if body is not None:  # read on the event loop (api/bodyread.py)
            environ["wsgi.input"] = io.BytesIO(body)
        with threads.serving():
            return app(environ, start_response)

    return terminated


def _existing_tokens(found: Services, digests: set[str]) -> set[str]:
    """Those of `digests` that are still tokens (an MCP host's OAuth token, unexpired)."""
    live = or_(ApiToken.expires_at.is_(None), ApiToken.expires_at > utcnow())
    query = select(ApiToken.token_hash).where(ApiToken.token_hash.in_(digests), live)
    with found.sessions() as session:
        return set(session.scalars(query))


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone away."""
    while (await receive())["type"] != "http.disconnect":
        pass

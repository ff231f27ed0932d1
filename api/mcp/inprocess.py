"""An httpx transport to an ASGI app in this process, streaming each response as it is sent.

httpx's own ASGITransport gathers a response's whole body before it returns it, which would
hold a run's output until the run ended and keep a long-poll's client from ever leaving. Here
the app runs in a task of its own: the response returns with its headers, its body arrives
chunk by chunk, and closing the response tells the app its client went away.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping
from typing import Any

import httpx
import structlog

from api.auth import RESOURCE_SCOPE_KEY

log = structlog.get_logger(__name__)

Message = MutableMapping[str, Any]
App = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Coroutine[Any, Any, None],
]
# Whose request this is, as the app sees it: put a (host, port) pair in a request's extensions
# under this key, so the API counts a wrong token against the MCP client, not this process.
CLIENT_EXTENSION = "skillfleet.client"
# The /mcp URL a request serves (an OAuth token is accepted only for its own): this key of a
# request's extensions becomes RESOURCE_SCOPE_KEY of its scope.
RESOURCE_EXTENSION = "skillfleet.resource"
CLOSE_SECONDS = 5.0  # an app told its client left has this long to end before it is cancelled


class InProcessTransport(httpx.AsyncBaseTransport):
    """Requests to `app`, served in this process without a socket."""

    def __init__(self, app: App) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        exchange = _Exchange(await request.aread())
        scope = _scope(request)
        task = asyncio.create_task(self.app(scope, exchange.receive, exchange.send))
        task.add_done_callback(exchange.app_ended)
        either: set[asyncio.Future[Any]] = {exchange.started, task}
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            exchange.gone.set()
            task.cancel()
            raise
        if not exchange.started.done():
            task.result()  # the app's own error, if it raised one
            raise httpx.RemoteProtocolError("The API ended without answering.", request=request)
        status, headers = exchange.started.result()
        return httpx.Response(status, headers=headers, stream=_Body(exchange, task))


class InProcessClient(httpx.AsyncClient):
    """An httpx client of `app` in this process, whose `send` hands each request straight to
    the in-process transport.

    One client serves every MCP caller of the process, each request carrying its caller's token,
    so it must keep nothing between them: no cookie jar (one caller's cookie would ride on the
    next caller's request), and no redirects, auth flows or per-request log line either, which a
    request to this same app never needs. Requests are built as by any client (`build_request`).
    """

    def __init__(self, app: App, base_url: str, timeout: httpx.Timeout) -> None:
        self.in_process = InProcessTransport(app)
        super().__init__(base_url=base_url, transport=self.in_process, timeout=timeout)

    async def send(
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,  # no auth flow: the request carries its token
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,  # the API answers, never redirects
    ) -> httpx.Response:
        response = await self.in_process.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response


def _scope(request: httpx.Request) -> Message:
    client = request.extensions.get(CLIENT_EXTENSION, ("127.0.0.1", 0))
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "headers": [(key.lower(), value) for key, value in request.headers.raw],
        "scheme": request.url.scheme,
        "path": request.url.path,
        "raw_path": request.url.raw_path.split(b"?")[0],
        "query_string": request.url.query,
        "server": (request.url.host, request.url.port),
        "client": client,
        "root_path": "",
        RESOURCE_SCOPE_KEY: request.extensions.get(RESOURCE_EXTENSION),
    }


class _Exchange:
    """One request's two sides: the body the app reads, the response it sends."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.started: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = (
            asyncio.get_running_loop().create_future()
        )
        self.chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.gone = asyncio.Event()

    async def receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if not self.started.done():
                self.started.set_result((message["status"], list(message.get("headers", []))))
        elif message["type"] == "http.response.body":
            if message.get("body"):
                self.chunks.put_nowait(bytes(message["body"]))
            if not message.get("more_body", False):
                self.chunks.put_nowait(None)

    def app_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None and self.started.done():
            log.warning("in-process request failed mid-answer", error=repr(task.exception()))
        self.chunks.put_nowait(None)  # whatever the app sent, the body ends here


class _Body(httpx.AsyncByteStream):
    """A response's body as the app sends it; closing it is the client going away."""

    def __init__(self, exchange: _Exchange, task: asyncio.Task[None]) -> None:
        self.exchange = exchange
        self.task = task

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (chunk := await self.exchange.chunks.get()) is not None:
            yield chunk

    async def aclose(self) -> None:
        self.exchange.gone.set()
        done, _ = await asyncio.wait({self.task}, timeout=CLOSE_SECONDS)
        if not done:
            self.task.cancel()

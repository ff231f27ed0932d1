"""The Flask app on a pool of threads, for the ASGI server, with answers that the thread hands
to the event loop without waiting for it.

a2wsgi's middleware (whose environ and request body this uses) has the request's thread wait
for the event loop at every message of an answer: its start, each piece of its body and its end
each go to the loop in a round trip, the thread blocked until the loop took it. Three such waits
for the smallest answer, some 0.2-0.3 ms each on a small machine, held the thread and delayed
everything after them in the request (Flask's teardown, the next request on that thread).

Here the thread posts each message to the loop (`call_soon_threadsafe`) and goes on; the loop
sends them in order. The thread waits only while SEND_AHEAD messages are posted and not yet
sent, as a client that reads slowly holds back a streamed body, so a long body is never held in
memory whole. When the answer can't be sent any more (the server's `send` failed), the thread
learns it at its next message (ClientGone) and the app's iterable is closed as usual.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from a2wsgi.wsgi import Body, build_environ

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

SEND_AHEAD = 10  # messages of one answer posted and not yet sent before its thread waits


class ClientGone(OSError):
    """Raised in the request's thread when its answer can no longer be sent."""


class WsgiBridge:
    """An ASGI application serving the WSGI `app` on `workers` threads."""

    def __init__(self, app: WsgiApp, workers: int) -> None:
        self.app = app
        self.executor = ThreadPoolExecutor(thread_name_prefix="WSGI", max_workers=workers)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1000})
            return
        loop = asyncio.get_running_loop()
        answer = _Answer(loop, send)
        environ = cast(
            dict[str, Any], build_environ(cast(Any, scope), Body(loop, cast(Any, receive)))
        )
        serve = functools.partial(contextvars.copy_context().run, answer.serve, self.app, environ)
        sender = loop.create_task(answer.sender())
        try:
            try:
                await loop.run_in_executor(self.executor, serve)
            except ClientGone:
                await sender  # raises what stopped it
                raise
            # Every message the thread posted is queued by now: each was a callback scheduled
            # before the one that completes the thread's future.
            answer.queue.put_nowait(None)
            await sender
        finally:
            if not sender.done():
                sender.cancel()


class _Answer:
    """One request's answer: made on its thread, sent on the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, send: Send) -> None:
        self.loop = loop
        self.send = send
        self.queue: asyncio.Queue[Message | None] = asyncio.Queue()
        self.started = False
        self._posted = 0  # posted and not yet sent
        self._gone = False  # the sender stopped: nothing more is sent
        self._room = threading.Condition()

    # -- on the request's thread -------------------------------------------------------

    def serve(self, app: WsgiApp, environ: dict[str, Any]) -> None:
        iterable = app(environ, self.start_response)
        try:
            for chunk in iterable:
                if chunk:
                    self._post({"type": "http.response.body", "body": chunk, "more_body": True})
            if not self.started:  # PEP 3333: an app must call start_response
                raise RuntimeError("The WSGI app returned without calling start_response.")
            self._post({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            close = getattr(iterable, "close", None)
            if close is not None:
                close()

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        if exc_info is not None and self.started:  # PEP 3333: too late to answer otherwise
            raise exc_info[1].with_traceback(exc_info[2])
        if not self.started:
            self.started = True
            self._post(
                {
                    "type": "http.response.start",
                    "status": int(status.split(" ", 1)[0]),
                    "headers": [
                        (name.strip().encode("latin1").lower(), value.strip().encode("latin1"))
                        for name, value in headers
                    ],
                }
            )
        return self._write

    def _write(self, chunk: bytes) -> None:
        if chunk:
            self._post({"type": "http.response.body", "body": chunk, "more_body": True})

    def _post(self, message: Message) -> None:
        with self._room:
            while self._posted >= SEND_AHEAD and not self._gone:
                self._room.wait()
            if self._gone:
                raise ClientGone("The answer can no longer be sent.")
            self._posted += 1
        self.loop.call_soon_threadsafe(self.queue.put_nowait, message)

    # -- on the event loop -------------------------------------------------------------

    async def sender(self) -> None:
        try:
            while (message := await self.queue.get()) is not None:
                await self.send(message)
                with self._room:
                    self._posted -= 1
                    self._room.notify()
        finally:
            with self._room:
                self._gone = True
                self._room.notify_all()

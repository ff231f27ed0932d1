"""The Flask app's threads and the event loop (api/wsgibridge.py), with plain WSGI apps: an
answer is made on its thread without waiting for the loop, sent in order, held back for a slow
client, and given up when it can't be sent."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from api.wsgibridge import SEND_AHEAD, ClientGone, WsgiBridge

SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "GET",
    "path": "/x",
    "query_string": b"",
    "http_version": "1.1",
    "headers": [],
}


async def no_body() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def app_of(pieces: Iterator[bytes], made: threading.Event | None = None):
    def app(environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body() -> Iterator[bytes]:
            yield from pieces
            if made is not None:
                made.set()

        return body()

    return app


def serve(app: Any, send: Any) -> None:
    bridge = WsgiBridge(app, workers=2)
    try:
        asyncio.run(bridge(dict(SCOPE), no_body, send))
    finally:
        bridge.executor.shutdown(wait=False)


def test_an_answer_goes_out_whole_and_in_order():
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    serve(app_of(iter([b"one ", b"", b"two ", b"three"])), send)
    assert sent[0] == {
        "type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]
    }  # fmt: skip
    assert [m["body"] for m in sent[1:]] == [b"one ", b"two ", b"three", b""]
    assert [m["more_body"] for m in sent[1:]] == [True, True, True, False]


def test_the_thread_makes_its_answer_while_the_event_loop_is_busy():
    """a2wsgi's thread waited for the loop at each message; held here, the loop would have
    stalled it at the first one."""
    made = threading.Event()
    held: list[bool] = []

    async def send(message: dict[str, Any]) -> None:
        if not held:  # the first message: hold the loop itself until the body is made
            held.append(made.wait(timeout=10))

    serve(app_of(iter([b"a", b"b", b"c"]), made), send)
    assert held == [True]


def test_a_slow_client_holds_the_thread_back_after_a_few_messages():
    produced: list[int] = []
    counts_while_held: list[int] = []

    def pieces() -> Iterator[bytes]:
        for index in range(SEND_AHEAD * 5):
            produced.append(index)
            yield b"x"

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":  # the client reads nothing meanwhile
            deadline = time.monotonic() + 10
            while len(produced) < SEND_AHEAD and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # time to make more, were it let
            counts_while_held.append(len(produced))

    serve(app_of(pieces()), send)
    # The start and SEND_AHEAD - 1 pieces posted, one more made and waiting for room.
    assert counts_while_held == [SEND_AHEAD]
    assert len(produced) == SEND_AHEAD * 5


def test_an_answer_that_can_t_be_sent_stops_its_app_and_frees_the_thread():
    closed = threading.Event()

    def pieces() -> Iterator[bytes]:
        try:
            while True:
                yield b"x"
                time.sleep(0.001)
        finally:
            closed.set()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the connection is gone")

    with pytest.raises(OSError, match="the connection is gone"):
        serve(app_of(pieces()), send)
    assert closed.wait(timeout=10)


def test_a_thread_told_the_client_is_gone_raises_at_its_next_piece():
    errors: list[BaseException] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        write = start_response("200 OK", [])
        deadline = time.monotonic() + 10
        while not errors and time.monotonic() < deadline:  # until the loop failed the start
            try:
                write(b"late")
            except ClientGone as e:
                errors.append(e)
            time.sleep(0.01)
        return []

    async def send(message: dict[str, Any]) -> None:
        raise OSError("gone")

    with pytest.raises(OSError, match="gone"):
        serve(app, send)
    assert len(errors) == 1


def test_an_app_that_fails_before_answering_raises_to_the_server():
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        raise ValueError("broken view")

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent")

    with pytest.raises(ValueError, match="broken view"):
        serve(app, send)


def test_an_app_that_never_starts_its_answer_is_an_error():
    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("nothing is sent")

    with pytest.raises(RuntimeError, match="start_response"):
        serve(lambda environ, start_response: [], send)


def test_a_websocket_is_closed():
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(WsgiBridge(app_of(iter([])), workers=1)({"type": "websocket"}, no_body, send))
    assert sent == [{"type": "websocket.close", "code": 1000}]

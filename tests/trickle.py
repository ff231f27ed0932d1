"""A loopback HTTP server that answers the way a slow-read attack does: one byte at a time.

It reads each request's head, then trickles its answer a byte every `every` seconds without
end: the status line and an endless header (`part="head"`), or a whole head at once and then
the body (`part="body"`; `"body-to-close"` gives no length). Each byte comes well within any
read timeout, so only a deadline over the whole request ends the read. `left` is set once a
client let go of its connection (the server's next byte found it closed).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

HEAD_START = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Slow: "
HEADS = {
    "body": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1000000\r\n\r\n",
    # A body that runs until the connection closes, as a stream of events often does.
    "body-to-close": b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n",
}


@dataclass
class Trickle:
    url: str
    sent: int = 0  # bytes trickled, over all connections
    requests: int = 0
    left: threading.Event = field(default_factory=threading.Event)


@contextmanager
def trickling(
    part: Literal["head", "body", "body-to-close"] = "head", every: float = 0.5
) -> Iterator[Trickle]:
    listener = socket.create_server(("127.0.0.1", 0))
    state = Trickle(f"http://127.0.0.1:{listener.getsockname()[1]}")
    stop = threading.Event()
    lock = threading.Lock()
    connections: list[socket.socket] = []

    def trickle(connection: socket.socket) -> None:
        with connection:
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                received += chunk
            with lock:
                state.requests += 1
            trickled = itertools.chain(HEAD_START, itertools.repeat(ord("a")))
            try:
                if part in HEADS:
                    connection.sendall(HEADS[part])
                while not stop.wait(every):
                    connection.sendall(bytes([next(trickled)]))
                    with lock:
                        state.sent += 1
            except OSError:  # the client closed its end: a byte found it gone
                state.left.set()

    def accept() -> None:
        listener.settimeout(0.05)  # to see `stop` soon
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(None)
            connections.append(connection)
            threading.Thread(target=trickle, args=(connection,), daemon=True).start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield state
    finally:
        stop.set()
        listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        acceptor.join(5)

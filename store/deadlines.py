"""One deadline over an outbound request: connect, TLS, the response's head and its body.

httpx's timeouts bound each network operation, not a request: a server that sends its headers
or its body a byte at a time, each byte within the read timeout, holds a read for as long as it
likes. A `Deadline` is the moment a request (its redirects and its body included) must be over
by, and `DeadlineTransport` holds every connection it makes to it:

- each connect, TLS handshake, read and write waits at most until the deadline (its own timeout
  shortened to what is left), and one that would start after it fails at once as a timeout;
- when the deadline passes, a watchdog shuts the connections' sockets down, so an operation no
  timeout cuts short (a handshake or a write the peer takes in drips) ends there as well (one
  timer thread per process serves every watchdog: `ALARMS`);
- whatever breaks once the deadline has passed is reported as a timeout, never as the
  disconnect the watchdog caused (nor as the end of a body that runs to the connection's
  close).

It stands on httpcore's public network-backend interface (a `NetworkBackend` wrapping
`SyncBackend`, a `ConnectionPool` using it) under an httpx transport, as httpx's own
`HTTPTransport` stands on httpcore. Every request to an owner's URL gets one through
`Egress.client` (store/egress.py).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

# httpcore's errors as httpx names them, the more specific first.
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)
# What a failure once the deadline passed is reported as, by the operation that failed.
_LATE = ((httpcore.ConnectError, httpx.ConnectTimeout), (httpcore.WriteError, httpx.WriteTimeout))
# Connections kept per host of one client: a client reads one thing, with its redirects.
MAX_CONNECTIONS = 10
KEEPALIVE_SECONDS = 5.0
TIMER_NAME = "egress-deadline"


@dataclass(frozen=True)
class Deadline:
    """The monotonic time by which a request must be over, and the seconds it was given."""

    seconds: float
    end: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(seconds, time.monotonic() + seconds)

    def left(self) -> float:
        """Seconds until the deadline; 0 once it passed."""
        return max(self.end - time.monotonic(), 0.0)

    def passed(self) -> bool:
        return time.monotonic() >= self.end

    def cut(self, timeout: float | None, late: type[Exception]) -> float:
        """`timeout` shortened to what is left; raises `late` when nothing is."""
        left = self.left()
        if left <= 0:
            raise late(self.message())
        return left if timeout is None else min(timeout, left)

    def message(self) -> str:
        return f"not over within its deadline of {self.seconds:g} seconds"


class Watchdog:
    """Shuts the sockets it watches down when the deadline passes (its alarm, set with the
    first connection). It watches a duplicate of each socket: shutting a connection down
    through it stops the request's reads and writes, TLS ones too."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._set = False  # its alarm was set (and stays so once cancelled)
        self._fired = False

    def watch(self, sock: socket.socket) -> socket.socket:
        watched = sock.dup()
        with self._lock:
            self._sockets.add(watched)
            if self._fired:
                _shut(watched)
            elif not self._set:
                self._set = True
                ALARMS.set(self)
        return watched

    def forget(self, watched: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(watched)
        watched.close()

    def close(self) -> None:
        """Cancel the alarm, and close what is still watched (a connection whose TLS handshake
        failed is never closed through its stream)."""
        with self._lock:
            if self._set:
                ALARMS.cancel(self)
            left, self._sockets = self._sockets, set()
        for watched in left:
            watched.close()

    def fire(self) -> None:
        with self._lock:
            self._fired = True
            for watched in self._sockets:
                _shut(watched)


class Alarms:
    """One timer thread that fires every watchdog of the process at its deadline.

    A thread per watchdog (a `threading.Timer`) made each request wait, before it connected,
    for its new thread to be scheduled: a millisecond on every model request of a turn. The
    thread starts with the first alarm and stays; a cancelled alarm leaves at once, so it holds
    only the requests open now.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._due: list[tuple[float, int, Watchdog]] = []  # a heap: the next deadline first
        self._order = itertools.count()  # equal deadlines in the order they were set
        self._thread: threading.Thread | None = None

    def set(self, watchdog: Watchdog) -> None:
        with self._wake:
            heapq.heappush(self._due, (watchdog.deadline.end, next(self._order), watchdog))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=TIMER_NAME, daemon=True)
                self._thread.start()
            self._wake.notify()

    def cancel(self, watchdog: Watchdog) -> None:
        with self._wake:
            kept = [due for due in self._due if due[2] is not watchdog]
            if len(kept) < len(self._due):
                heapq.heapify(kept)
                self._due = kept

    def pending(self) -> int:
        """Alarms set and neither fired nor cancelled."""
        with self._wake:
            return len(self._due)

    def reset(self) -> None:
        """Forget the parent's alarms and thread in a forked child (neither is there)."""
        self._wake = threading.Condition()
        self._due = []
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._wake.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _end, _order, watchdog = heapq.heappop(self._due)
            watchdog.fire()  # outside the lock: a watchdog's own is taken before it


ALARMS = Alarms()
os.register_at_fork(after_in_child=ALARMS.reset)


def _shut(watched: socket.socket) -> None:
    try:
        watched.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer: nothing left to stop


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the deadline."""

    def __init__(
        self, stream: httpcore.NetworkStream, deadline: Deadline, watchdog: Watchdog,
        watched: socket.socket,
    ) -> None:  # fmt: skip
        self.stream = stream
        self.deadline = deadline
        self.watchdog = watchdog
        self.watched = watched

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self.stream.read(max_bytes, self.deadline.cut(timeout, httpcore.ReadTimeout))
        if not data and self.deadline.passed():  # the watchdog's shutdown, not the body's end
            raise httpcore.ReadTimeout(self.deadline.message())
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self.deadline.cut(timeout, httpcore.WriteTimeout))

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        timeout = self.deadline.cut(timeout, httpcore.ConnectTimeout)
        self.stream = self.stream.start_tls(ssl_context, server_hostname, timeout)
        return self

    def close(self) -> None:
        self.watchdog.forget(self.watched)
        self.stream.close()

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous backend, its connections held to one deadline."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.watchdog = Watchdog(deadline)
        self.backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = self.deadline.cut(timeout, httpcore.ConnectTimeout)
        stream = self.backend.connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            watched = self.watchdog.watch(stream.get_extra_info("socket"))
        except OSError as e:  # no descriptor left to watch it with: not a connection to keep
            stream.close()
            raise httpcore.ConnectError(f"the connection can't be watched: {e}") from e
        return DeadlineStream(stream, self.deadline, self.watchdog, watched)

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(min(seconds, self.deadline.left()))

    def close(self) -> None:
        self.watchdog.close()


@functools.cache
def _checking() -> ssl.SSLContext:
    """The certificate-checking context every pool shares: loading the CA bundle takes tens of
    milliseconds (a model's first token waited for it), and one context serves any number of
    connections and threads."""
    return _context(True)


def _context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    return httpx.create_ssl_context(verify=verify, trust_env=False)


class DeadlineTransport(httpx.BaseTransport):
    """An httpx transport over an httpcore pool whose connections `backend` holds to its
    deadline; environment settings (proxies, certificate paths) are not used."""

    def __init__(self, backend: DeadlineBackend, verify: ssl.SSLContext | bool = True) -> None:
        self.backend = backend
        self.pool = httpcore.ConnectionPool(
            ssl_context=_checking() if verify is True else _context(verify),
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_SECONDS,
            network_backend=backend,
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        with self.mapped():
            answer = self.pool.handle_request(self._core(request))
        assert isinstance(answer.stream, Iterable)
        return httpx.Response(
            status_code=answer.status,
            headers=answer.headers,
            stream=_Body(answer.stream, self.mapped),
            extensions=answer.extensions,
        )

    def _core(self, request: httpx.Request) -> httpcore.Request:
        """`request` for httpcore, each of its timeouts shortened to what the deadline leaves."""
        deadline = self.backend.deadline
        timeouts = request.extensions.get("timeout", {})
        late = httpcore.ConnectTimeout
        return httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions={
                **request.extensions,
                "timeout": {key: deadline.cut(value, late) for key, value in timeouts.items()},
            },
        )

    @contextmanager
    def mapped(self) -> Iterator[None]:
        """httpcore's errors raised as httpx's, and as a timeout once the deadline passed."""
        try:
            yield
        except Exception as e:
            error = _httpx_error(e, self.backend.deadline)
            if error is None:
                raise
            raise error from e

    def close(self) -> None:
        self.pool.close()


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterable[bytes], mapped: Callable[[], Any]) -> None:
        self.stream = stream
        self.mapped = mapped

    def __iter__(self) -> Iterator[bytes]:
        with self.mapped():
            yield from self.stream

    def close(self) -> None:
        closing = getattr(self.stream, "close", None)
        if closing is not None:
            closing()


def _httpx_error(error: Exception, deadline: Deadline) -> httpx.TransportError | None:
    kind = next((theirs for ours, theirs in _ERRORS if isinstance(error, ours)), None)
    if kind is None:
        return None
    if not deadline.passed():
        return kind(str(error))
    if not issubclass(kind, httpx.TimeoutException):
        kind = next(
            (theirs for ours, theirs in _LATE if isinstance(error, ours)), httpx.ReadTimeout
        )
    return kind(deadline.message())

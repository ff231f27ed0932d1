"""The round trips of a run's path, on Redis connections kept aside for them.

`execute(pipe)` answers what `pipe.execute()` would, without what `Pipeline.execute` does
around the commands: take a connection from the pool under its lock, record metrics and
events, and give it back. That costs a round trip 0.06-0.1 ms of CPU (measured alone, and
with a script's worth of memory touched between calls: docs/benchmarks.md, seventeenth pass),
and a node run makes five such round trips.

The commands and their replies are redis-py's own: packed by the connection, each reply read
and parsed by the pipeline's `parse_response`, error replies raised or returned as
`Pipeline.execute` does. As the pool does before lending a connection, one that is readable
while idle (the server closed it, or a reply was left unread) is dropped and made again; a
connection error is retried under the connection's retry policy, as redis-py retries a
pipeline. The spare connections of a pool are kept per process (a forked child makes its own),
as many as were ever in use at once.

Within `holding()`, a pipeline given to `hold` waits for the block's next round trip that takes
it (`take_held`): a tool call that waits for its run sends the owner's events and the
decision's count with the wait's first read (relay.streams.wait_for_end) instead of in a round
trip of their own. What no round trip took is sent as the block ends.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import ResponseError

# Per pool: the process that made the connections, and the spare connections.
_spares: weakref.WeakKeyDictionary[redis.ConnectionPool, tuple[int, collections.deque[Any]]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()
# The pipelines held for a later round trip of this block, and how to send them; outside one
# None.
_held: ContextVar[_Holding | None] = ContextVar("skillfleet_wire_held", default=None)


def execute(pipe: Pipeline, raise_on_error: bool = True) -> list[Any]:
    """Send `pipe`'s commands (never a transaction) and return their replies."""
    staged: Any = pipe  # redis-py's Pipeline is untyped; `transaction` is its flag here
    if staged.transaction or staged.watching or staged.scripts:
        raise ValueError("wire.execute sends plain pipelines only")
    commands = pipe.command_stack
    if not commands:
        return []
    spares = _spares_of(pipe.connection_pool)
    try:
        connection = spares.pop()
    except IndexError:
        connection = pipe.connection_pool.connection_class(**pipe.connection_pool.connection_kwargs)
    try:
        if connection.is_connected and _stale(connection):
            connection.disconnect()  # the send connects again
        replies: list[Any] = connection.retry.call_with_retry(
            lambda: _round_trip(staged, connection, commands),
            lambda _error: connection.disconnect(),
        )
    finally:
        pipe.command_stack = []
        spares.append(connection)
    if raise_on_error:
        for number, reply in enumerate(replies, 1):
            if isinstance(reply, ResponseError):
                staged.annotate_exception(reply, number, commands[number - 1][0])
                raise reply
    return replies


def _stale(connection: Any) -> bool:
    """Readable while idle: the server closed it (it restarted, or timed it out), or a reply
    was left unread."""
    try:
        return bool(connection.can_read())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return True


def _round_trip(pipe: Any, connection: Any, commands: list[Any]) -> list[Any]:
    connection.send_packed_command(connection.pack_commands([args for args, _ in commands]))
    replies: list[Any] = []
    try:
        for args, options in commands:
            try:
                replies.append(pipe.parse_response(connection, args[0], **options))
            except ResponseError as e:
                replies.append(e)
    except BaseException:
        # Replies may still be on the socket: never read them as the next call's.
        connection.disconnect()
        raise
    return replies


def _spares_of(pool: redis.ConnectionPool) -> collections.deque[Any]:
    """The spare connections to `pool`'s server made in this process (a deque: its pop and
    append are atomic, so taking and giving back need no lock)."""
    found = _spares.get(pool)
    pid = os.getpid()
    if found is None or found[0] != pid:
        with _lock:
            found = _spares.get(pool)
            if found is None or found[0] != pid:
                found = (pid, collections.deque())
                _spares[pool] = found
    return found[1]


@dataclass
class _Holding:
    send: Callable[[Pipeline], object]
    pipes: list[Pipeline] = field(default_factory=list)


@contextmanager
def holding(send: Callable[[Pipeline], object]) -> Iterator[None]:
    """Let `hold` keep pipelines within the block; `send` sends each one still held at its end."""
    token = _held.set(_Holding(send))
    try:
        yield
    finally:
        send_held()
        _held.reset(token)


def hold(pipe: Pipeline) -> bool:
    """Keep `pipe` for a later round trip of this `holding` block; False outside one."""
    holding = _held.get()
    if holding is None:
        return False
    holding.pipes.append(pipe)
    return True


def take_held() -> list[Any]:
    """The commands of the pipelines held so far, to send before one's own; they are no longer
    held."""
    holding = _held.get()
    if holding is None or not holding.pipes:
        return []
    commands = [command for pipe in holding.pipes for command in pipe.command_stack]
    for pipe in holding.pipes:
        pipe.command_stack = []
    holding.pipes.clear()
    return commands


def send_held() -> None:
    """Send what is held now, each pipeline in a round trip of its own (no round trip of the
    block will take them soon)."""
    holding = _held.get()
    if holding is None:
        return
    while holding.pipes:
        holding.send(holding.pipes.pop(0))

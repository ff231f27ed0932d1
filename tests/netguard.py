"""A guard over the test process's outgoing connections: while it is on, every connection is
recorded, and one to an address off loopback is stopped before it is made.

It hears Python's `socket.connect` audit event, which fires before the system call: a refused
address is proven never connected to, and a test can never send traffic beyond loopback.
"""

from __future__ import annotations

import ipaddress
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_lock = threading.Lock()
_watches: list[list[tuple[str, int]]] = []
_installed = False


class ConnectionStopped(OSError):
    """Raised in place of a connection to an address off loopback."""


@contextmanager
def watched_connections() -> Iterator[list[tuple[str, int]]]:
    """Every (address, port) connected to while the block runs; off-loopback ones are stopped."""
    global _installed
    seen: list[tuple[str, int]] = []
    with _lock:
        if not _installed:
            sys.addaudithook(_hear)
            _installed = True
        _watches.append(seen)
    try:
        yield seen
    finally:
        with _lock:
            _watches.remove(seen)


def _hear(event: str, args: tuple[Any, ...]) -> None:
    if event != "socket.connect" or not _watches:
        return
    address = args[1]
    if not isinstance(address, tuple):  # a unix socket
        return
    host, port = str(address[0]), int(address[1])
    with _lock:
        for seen in _watches:
            seen.append((host, port))
    if not ipaddress.ip_address(host.partition("%")[0]).is_loopback:
        raise ConnectionStopped(f"a test tried to connect to {host}:{port}")

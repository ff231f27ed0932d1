"""A loopback HTTP server for tests that receive what the system posts (webhooks)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def receiver() -> Iterator[tuple[int, list[tuple[str, dict[str, str], bytes]]]]:
    """A loopback HTTP server keeping every POST (path, headers, body); its port and those."""
    got: list[tuple[str, dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, got
    finally:
        server.shutdown()
        server.server_close()

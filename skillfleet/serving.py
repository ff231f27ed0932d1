"""gunicorn's configuration for the API (`--config python:skillfleet.serving`), and the worker
class it runs (`skillfleet.serving.Worker`: uvicorn's, with a time limit on request headers).

Prometheus multiprocess mode: every worker process writes its metrics into one folder, so a
scrape answered by any worker gives the totals of all of them. The folder is made before the
workers start (they import prometheus_client after PROMETHEUS_MULTIPROC_DIR is set), emptied of
files left by an earlier run, and a dead worker's live gauges are dropped.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn_worker import UvicornWorker

from store.settings import Settings

_made: list[Path] = []


def on_starting(server: Any) -> None:
    configured = Settings.from_env().metrics_dir
    if configured is None:
        folder = Path(tempfile.mkdtemp(prefix="skillfleet-metrics-"))
        _made.append(folder)
    else:
        folder = configured
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.db"):
            stale.unlink()
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


def post_worker_init(worker: Any) -> None:
    freeze_startup_heap()


def freeze_startup_heap() -> None:
    """Leave the objects a long-running process made while starting out of garbage collection.

    Imports and set-up leave about 150,000 objects in an API worker and 205,000 in a node
    worker, all living as long as the process, and every full pass of the collector walked them
    all: 93 ms in an API worker and 152 ms in a node worker, each once in the first 1,000 runs
    after warm-up, a pause for whoever was waiting on that process. Frozen, they are never
    walked again (a full pass then walks a few thousand objects); what the process makes later
    is collected as before.
    """
    gc.freeze()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)


# -- requests in time -----------------------------------------------------------------------
# uvicorn has no limit on how long a client may take to send a request's headers or body, so a
# client trickling them (slowloris), or connecting and sending nothing, keeps its socket for
# ever, and one whose body never comes holds a Flask thread. This protocol closes a connection
# whose request line and headers are not all in within SKILLFLEET_HEADER_TIMEOUT seconds of its
# start (or of its next request's first byte), or whose body goes that long without a byte.
# A connection that ends also ends every response still open on it, not only the newest (a
# client that sent a second request behind a stream). It extends uvicorn's httptools protocol
# through the parser callbacks the protocol is built on, and is fenced here.


class RequestsInTime(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections whose requests take over `seconds`."""

    seconds = 10.0
    _due: asyncio.TimerHandle | None = None
    _open_cycles: list[Any] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._open_cycles = []
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()
        self._arm()  # now for the body, until the message is complete
        if self._open_cycles is not None and self.cycle is not None:
            self._open_cycles = [c for c in self._open_cycles if not c.response_complete]
            self._open_cycles.append(self.cycle)

    def on_body(self, body: bytes) -> None:
        self._disarm()
        super().on_body(body)
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        for cycle in self._open_cycles or ():
            if cycle is not self.cycle and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._due is None:
            self._due = self.loop.call_later(self.seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._due is not None:
            self._due.cancel()
            self._due = None

    def _too_slow(self) -> None:
        self._due = None
        if self.flow.read_paused:  # the app has not taken what came yet: the wait is ours
            self._arm()
        elif not self.transport.is_closing():
            self.transport.close()


def headers_in_time(seconds: float) -> type[RequestsInTime]:
    """The protocol with a limit of `seconds`."""
    return type("RequestsInTime", (RequestsInTime,), {"seconds": seconds})


class Worker(UvicornWorker):  # type: ignore[misc]
    """gunicorn's uvicorn worker with the request time limits (gunicorn's --worker-class)."""

    CONFIG_KWARGS = {
        "loop": "auto",
        "http": headers_in_time(Settings.from_env().header_timeout),
        "server_header": False,
        # The client's address is the peer's; X-Forwarded-For counts only as
        # SKILLFLEET_TRUSTED_PROXIES says (api/auth.py), not by uvicorn's own rule.
        "proxy_headers": False,
        # On shutdown, open streams get this long to end before the live tier ends them
        # (within gunicorn's --graceful-timeout).
        "timeout_graceful_shutdown": 3,
    }

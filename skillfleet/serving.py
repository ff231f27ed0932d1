"""gunicorn's configuration for the API (`--config python:skillfleet.serving`), the worker
class it runs (`skillfleet.serving.Worker`: uvicorn's, with a time limit on request headers)
and the app it serves (`skillfleet.serving:create_app()`: the API, with its request log).

Prometheus multiprocess mode: every worker process writes its metrics into one folder, so a
scrape answered by any worker gives the totals of all of them. The folder is made before the
workers start (they import prometheus_client after PROMETHEUS_MULTIPROC_DIR is set), emptied of
files left by an earlier run, and a dead worker's live gauges are dropped.

The request log: with gunicorn's `--access-logfile` (`skillfleet up` gives it
var/logs/api.log), a line per request once its answer is complete, streams included: method,
path, the names of the query's parameters (never their values), for `/mcp` the MCP method and
the tool of a `tools/call`, status, duration and the client's address. Never a header (the
token is one) or a body. uvicorn's own access line, which holds the whole query string, is off.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import structlog
from uvicorn_worker import UvicornWorker

from relay.fenced.uvicorn_http import http_protocol
from skillfleet.heap import freeze_startup_heap, pause_collection
from store.logs import line_logger
from store.settings import Settings

# gunicorn's access log: `--access-logfile` gives it its handler, in every worker.
REQUEST_LOGGER = "gunicorn.access"
# gunicorn's control socket (for `gunicornc`, since gunicorn 25) is off: nothing here uses it, and
# every gunicorn of a user shares its default path ($HOME/.gunicorn/gunicorn.ctl), so a second
# API on the machine took the socket over and the first one's exit removed it from under the
# second ("Control server error" in its log).
control_socket_disable = True

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_made: list[Path] = []


def on_starting(server: Any) -> None:
    pause_collection()  # until when_ready: the imports below are the master's start-up heap
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
    # The API's modules, imported once here (after the metrics folder is known): each worker
    # forked from this process finds them imported, instead of spending about 2 s of CPU on
    # them itself. Nothing is built here: each worker makes its own app, connections and
    # threads (create_app).
    import api.asgi  # noqa: F401
    import api.mcp.http  # noqa: F401


def when_ready(server: Any) -> None:
    # Before the first worker is forked: the workers share the frozen imports' pages.
    freeze_startup_heap()


def post_worker_init(worker: Any) -> None:
    freeze_startup_heap()


def child_exit(server: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def on_exit(server: Any) -> None:
    for folder in _made:
        shutil.rmtree(folder, ignore_errors=True)


class Worker(UvicornWorker):  # type: ignore[misc]
    """gunicorn's uvicorn worker with the request time limits (gunicorn's --worker-class)."""

    CONFIG_KWARGS = {
        "loop": "auto",
        "http": http_protocol(Settings.from_env()),
        "server_header": False,
        # Its line holds the query string; the request log (RequestLog) leaves the values out.
        "access_log": False,
        # The client's address is the peer's; X-Forwarded-For counts only as
        # SKILLFLEET_TRUSTED_PROXIES says (api/auth.py), not by uvicorn's own rule.
        "proxy_headers": False,
        # On shutdown, open streams get this long to end before the live tier ends them
        # (within gunicorn's --graceful-timeout).
        "timeout_graceful_shutdown": 3,
    }


def create_app() -> App:
    """What gunicorn serves: the API's ASGI app, with the request log when gunicorn was given
    `--access-logfile`."""
    from api.asgi import create_asgi_app
    from api.mcp.http import LOG_SCOPE_KEY

    app: App = create_asgi_app()
    if not logging.getLogger(REQUEST_LOGGER).handlers:
        return app
    log = line_logger(REQUEST_LOGGER, Settings.from_env().log_format)
    return RequestLog(app, log, LOG_SCOPE_KEY)


class RequestLog:
    """Logs each HTTP request once its answer is complete (see the module's text); what the
    app left in the request's scope under `scope_key` (a dict) is logged with it."""

    def __init__(
        self, app: App, log: structlog.typing.FilteringBoundLogger, scope_key: str = ""
    ) -> None:
        self.app = app
        self.log = log
        self.scope_key = scope_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: int | None = None

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                **query_names(scope),
                **(scope.get(self.scope_key) or {}),
                status=status,
                ms=round((time.perf_counter() - started) * 1000, 1),
                client=(scope.get("client") or ("-",))[0],
            )


def query_names(scope: Scope) -> dict[str, list[str]]:
    """`{"query": [names]}` of the request's query parameters, or nothing when it has none."""
    raw = bytes(scope.get("query_string") or b"").decode("latin-1")
    names = sorted({name for name, _ in parse_qsl(raw, keep_blank_values=True)})
    return {"query": names} if names else {}

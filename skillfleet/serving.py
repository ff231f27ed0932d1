"""gunicorn's configuration for the API (`--config python:skillfleet.serving`), and the worker
class it runs (`skillfleet.serving.Worker`: uvicorn's, with a time limit on request headers).

Prometheus multiprocess mode: every worker process writes its metrics into one folder, so a
scrape answered by any worker gives the totals of all of them. The folder is made before the
workers start (they import prometheus_client after PROMETHEUS_MULTIPROC_DIR is set), emptied of
files left by an earlier run, and a dead worker's live gauges are dropped.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from uvicorn_worker import UvicornWorker

from relay.fenced.uvicorn_http import http_protocol
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


class Worker(UvicornWorker):  # type: ignore[misc]
    """gunicorn's uvicorn worker with the request time limits (gunicorn's --worker-class)."""

    CONFIG_KWARGS = {
        "loop": "auto",
        "http": http_protocol(Settings.from_env()),
        "server_header": False,
        # The client's address is the peer's; X-Forwarded-For counts only as
        # SKILLFLEET_TRUSTED_PROXIES says (api/auth.py), not by uvicorn's own rule.
        "proxy_headers": False,
        # On shutdown, open streams get this long to end before the live tier ends them
        # (within gunicorn's --graceful-timeout).
        "timeout_graceful_shutdown": 3,
    }

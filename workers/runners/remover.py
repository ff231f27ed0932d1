"""What a finished run leaves to remove, removed on a thread of its own: the run's end needn't
wait for it.

A node run's folder on a disk's file system takes a few milliseconds to remove (more on a busy
host), and the sweep of what its uid left in /tmp follows it. Both are held by the worker's
keeper until they are done, so a worker that dies with removals still queued leaves nothing
behind: its keeper removes them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class Remover:
    """Runs removals in the order they were put, on one thread started at the first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._removals: queue.Queue[Callable[[], None]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, removal: Callable[[], None]) -> None:
        with self._lock:
            # A forked child finds the thread not alive, and starts its own.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
        self._removals.put(removal)

    def settle(self) -> None:
        """Wait until every removal put so far is done."""
        self._removals.join()

    def _work(self) -> None:
        while True:
            removal = self._removals.get()
            try:
                removal()
            except Exception:  # one failed removal must not stop the ones after it
                log.exception("a finished run's removal failed", removal=repr(removal))
            finally:
                self._removals.task_done()

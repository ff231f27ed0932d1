"""The process groups of a node worker's running scripts, killed if the worker dies.

A script dies with its worker by its parent-death signal (workers/runners/launch.c, setpriv or
a prctl), but the processes the script started do not: the signal is not inherited across a
fork. A `bash` script's `rsync`, or a Python script's subprocess, would go on running after a
`kill -9` of the worker, while the run is answered `interrupted` and "will not run again".

So a node worker starts a keeper: a small process that holds the process group of each script
while it runs (every script leads a group of its own) and kills them all once the worker's end
of its pipe closes. The kernel closes that pipe however the worker ends, SIGKILL included, and
no script holds it (a script inherits no descriptor but its standard ones). The keeper ignores
the signals a terminal or a service manager sends a worker's process group, so it is still
there to do its job while the worker stops.

Run as `python -m workers.runners.keeper`; it reads `+<pgid>` and `-<pgid>` lines.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO

import structlog

log = structlog.get_logger(__name__)


class GroupKeeper:
    """This process's keeper, started at its first `hold`; a forked child starts its own."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command or [sys.executable, "-m", __name__]
        self._lock = threading.Lock()
        self._pipe: IO[bytes] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started the keeper
        self._held: set[int] = set()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def hold(self, group: int) -> None:
        """Kill process group `group` if this process dies before `release(group)`."""
        with self._lock:
            self._held.add(group)
            self._send(b"+%d\n" % group)

    def release(self, group: int) -> None:
        with self._lock:
            self._held.discard(group)
            self._send(b"-%d\n" % group)

    def _send(self, line: bytes) -> None:
        for _attempt in range(2):
            if self._pipe is None or self._owner != os.getpid():
                if not self._start():
                    return
                line = b"".join(b"+%d\n" % group for group in self._held)  # all, to a new one
            assert self._pipe is not None
            try:
                self._pipe.write(line)
                self._pipe.flush()
                return
            except OSError:  # the keeper was killed: start another, tell it everything
                self._pipe = None

    def _start(self) -> bool:
        try:
            self._process = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, start_new_session=True
            )
        except OSError as e:
            log.warning("no keeper: a dead worker's scripts may leave processes", error=str(e))
            return False
        self._pipe = self._process.stdin
        self._owner = os.getpid()
        return True


def main() -> None:
    for ignored in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(ignored, signal.SIG_IGN)
    held: set[int] = set()
    for line in sys.stdin.buffer:
        sign, group = line[:1], int(line[1:])
        if sign == b"+":
            held.add(group)
        else:
            held.discard(group)
    for group in held:  # the worker is gone
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":
    main()

"""What a worker's running scripts hold, ended if the worker dies.

A node script dies with its worker by its parent-death signal (workers/runners/launch.c,
setpriv or a prctl), but the processes the script started do not: the signal is not inherited
across a fork. A `bash` script's `rsync`, or a Python script's subprocess, would go on running
after a `kill -9` of the worker, while the run is answered `interrupted` and "will not run
again". A Spark run's container (and its egress proxy) would run on until another Spark worker
started on that engine.

So a worker starts a keeper: a small process told what each running script holds (a node
script's process group: every script leads a group of its own; a Spark run's label on its
containers and volumes) that ends all of it once the worker's end of its pipe closes. The
kernel closes that pipe however the worker ends, SIGKILL included, and no script holds it (a
script inherits no descriptor but its standard ones). The keeper ignores the signals a
terminal or a service manager sends a worker's process group, so it is still there to do its
job while the worker stops.

Run as `python -m workers.runners.keeper`; it reads lines `+<kind> <what>` and `-<kind> <what>`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import IO

GROUP = "group"  # a process group, by its id: killed
LABEL = "label"  # a Docker label (`key=value`): its containers and volumes removed
FOLDER = "folder"  # a run's folder: removed
UID = "uid"  # a run's uid: what it left in the shared temporary folders removed


class Keeper:
    """A process's keeper, started by `start` (a worker's start) or at its first `hold`; a forked
    child starts its own."""

    def __init__(self, command: list[str] | None = None) -> None:
        self.command = command or [sys.executable, "-m", __name__]
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._pipe: IO[bytes] | None = None
        self._owner = 0  # the pid that started the keeper
        self._held: set[tuple[str, str]] = set()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the keeper now, off the first run's path."""
        with self._lock:
            if self._pipe is None or self._owner != os.getpid():
                self._start()

    def hold(self, kind: str, what: object) -> None:
        """End `what` (a GROUP or a LABEL) if this process dies before `release`."""
        item = (kind, str(what))
        with self._lock:
            self._held.add(item)
            self._send(_line(b"+", item))

    def release(self, kind: str, what: object) -> None:
        item = (kind, str(what))
        with self._lock:
            self._held.discard(item)
            self._send(_line(b"-", item))

    def close(self) -> None:
        """End what is held now, as if this process had died (its pipe closes)."""
        with self._lock:
            if self._pipe is not None and self._owner == os.getpid():
                self._pipe.close()
            self._pipe = None

    def _send(self, line: bytes) -> None:
        for _attempt in range(2):
            if self._pipe is None or self._owner != os.getpid():
                if not self._start():
                    return
                # A new keeper is told all that is held (the line's item among it).
                line = b"".join(_line(b"+", item) for item in self._held)
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
            # Imported here: the keeper's own process (main) runs this module and never logs,
            # and structlog would be most of its start (0.25 s of CPU a worker).
            import structlog

            log = structlog.get_logger(__name__)
            log.warning("no keeper: what a dead worker's scripts hold may stay", error=str(e))
            return False
        self._pipe = self._process.stdin
        self._owner = os.getpid()
        return True


def _line(sign: bytes, item: tuple[str, str]) -> bytes:
    kind, what = item
    return b"%s%s %s\n" % (sign, kind.encode(), what.encode())


# This process's: its runners share it.
KEEPER = Keeper()


def main() -> None:
    for ignored in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(ignored, signal.SIG_IGN)
    held: set[tuple[str, str]] = set()
    for line in sys.stdin.buffer:
        kind, _, what = line[1:].decode().strip().partition(" ")
        if line.startswith(b"+"):
            held.add((kind, what))
        else:
            held.discard((kind, what))
    # The worker is gone.
    for kind, what in held:
        if kind == GROUP and what.isdigit():
            try:
                os.killpg(int(what), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    labels = sorted(what for kind, what in held if kind == LABEL)
    if labels:
        _remove_labelled(labels)
    _remove_runs_leftovers(held)


def _remove_runs_leftovers(held: set[tuple[str, str]]) -> None:
    """The folders of a node's runs, and what their uids left in /tmp (their processes are
    gone: each was its PID namespace's, which ended with its group)."""
    import shutil

    for kind, what in held:
        if kind == FOLDER and os.path.isabs(what):
            shutil.rmtree(what, ignore_errors=True)
    uids = [int(what) for kind, what in held if kind == UID and what.isdigit()]
    if uids:
        from workers.runners.isolation import sweep

        for uid in uids:
            sweep(uid)


def _remove_labelled(labels: list[str]) -> None:
    """Remove the containers, then the volumes, that carry each of `labels`."""
    import docker  # only a Spark worker's keeper holds labels
    import requests
    from docker.errors import DockerException, NotFound

    try:
        client = docker.from_env()
        for label in labels:
            # What went meanwhile (the run's own end, another worker's start) is gone already.
            listed = client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
            for container in listed:
                with contextlib.suppress(NotFound):
                    container.remove(force=True)
            for volume in client.volumes.list(filters={"label": label}):
                with contextlib.suppress(NotFound):
                    volume.remove(force=True)
    except (DockerException, requests.exceptions.RequestException) as e:
        print(f"keeper: what the worker's runs left could not be removed: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()

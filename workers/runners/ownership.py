"""Which worker made a container or volume on a Docker engine, and whether it still runs.

Several workers may share one engine (a Spark worker, a container sandbox worker, a second
Spark worker on the same host). Each labels what it makes with its process, `host:pid:start`,
and a worker's start removes the leftovers of workers that are gone, never what a live worker
is using.
"""

from __future__ import annotations

import os
import socket

WORKER_LABEL = "skillfleet.worker"


def worker_identity(pid: int | None = None) -> str:
    """This process as `host:pid:start` (its start in clock ticks since boot): a pid the kernel
    gives again later has another start."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_started(pid)}"


def worker_alive(identity: str | None) -> bool:
    """Whether the worker named by a WORKER_LABEL still runs. Only a worker of this host can be
    asked; one of another host (a container of its own) counts as gone, as every worker did
    before workers were named."""
    if not identity:
        return False
    host, _, rest = identity.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    return started != "" and _started(int(pid)) == started


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot; empty when there is no process."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def made_by_live_worker(labels: dict[str, str] | None) -> bool:
    """Whether the labels of a container or volume name a worker that still runs."""
    return worker_alive((labels or {}).get(WORKER_LABEL))

"""A container run's working directory: a volume of its own at /work, the call's files put in
before the script starts, and what the run made read back after it ended.

The volume, not a folder of this machine, because the worker may itself run in a container
whose paths the engine can't see (as the skill's volume, workers/runners/skill_volumes.py). The
runner image's /work belongs to the container's user, and a new volume takes its owner from it.
Files go in and come out through the engine's archive API, on the created (then the stopped)
container; or, when the engine runs on this host and the worker can reach the volume's folder
(`SKILLFLEET_SPARK_WORK_DIRECT`, on by default), straight in that folder: the engine's archive
calls mount the container's file systems each time, and cost more than the files themselves.
The folder is written before the script starts and read after its container stopped, so no
process of the run lives meanwhile; links are never followed either way (workers/runfiles.py).
"""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from broker.runs import Outcome
from workers.runfiles import RunFiles, collect, found_in, found_in_tar, place_inputs

WORK_MOUNT = "/work"
RUN_UID = 65534
SPOOL_BYTES = 4 * 1024 * 1024  # an archive larger than this goes to a temporary file


@dataclass(frozen=True)
class WorkVolume:
    """A run's /work volume: its name, and its folder as this worker sees it (None: reached
    through the engine's archive API only)."""

    name: str
    folder: Path | None = None


def create_volume(client: Any, labels: dict[str, str], direct: bool = True) -> WorkVolume:
    """A new volume for one run's /work; with `direct`, its folder when this worker reaches it."""
    volume = client.volumes.create(labels=labels)
    folder = reachable(volume.attrs.get("Mountpoint")) if direct else None
    return WorkVolume(str(volume.name), folder)


def reachable(mountpoint: str | None) -> Path | None:
    """The volume's folder when it is a folder this worker may write (the engine on this host,
    the worker root as the engine is); None otherwise (a worker in a container of its own, a
    rootless engine, an engine in a VM)."""
    if not mountpoint:
        return None
    folder = Path(mountpoint)
    try:
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or not os.access(folder, os.W_OK | os.X_OK):
        return None
    return folder


def put_inputs(
    container: Any,
    channel: RunFiles,
    run_id: str,
    inputs: Mapping[str, Mapping[str, Any]],
    work: WorkVolume,
) -> None:
    """Fetch the call's files and put them into the created container's /work, owned by the
    container's user; raises InputFileUnavailable when one does not arrive whole."""
    if work.folder is not None:  # the container was created: the volume holds the image's /work
        place_inputs(channel, run_id, inputs, work.folder, RUN_UID)
        return
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
        with tarfile.open(fileobj=spool, mode="w") as archive:
            folders: set[str] = set()
            for path, entry in sorted(inputs.items()):
                parts = path.split("/")[:-1]
                for depth in range(1, len(parts) + 1):
                    folder = "/".join(parts[:depth])
                    if folder not in folders:
                        folders.add(folder)
                        archive.addfile(_member(folder, tarfile.DIRTYPE, 0o755))
                with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as data:
                    channel.fetch(run_id, path, entry, data)
                    size = data.tell()
                    data.seek(0)
                    archive.addfile(_member(path, tarfile.REGTYPE, 0o644, size), data)
        spool.seek(0)
        if not container.put_archive(WORK_MOUNT, spool.read()):
            raise OSError("the engine did not take the run's files")


def collect_outputs(
    container: Any,
    channel: RunFiles,
    run_id: str,
    inputs: Mapping[str, Mapping[str, Any]],
    outcome: Outcome,
    work: WorkVolume,
) -> Outcome:
    """Read the stopped container's /work and send back what the run created or changed."""
    if work.folder is not None:
        sent = collect(channel, run_id, found_in(work.folder), inputs)
        return replace(outcome, files=tuple(sent.files), files_note=sent.note())
    chunks, _stat = container.get_archive(f"{WORK_MOUNT}/.")
    with tempfile.SpooledTemporaryFile(SPOOL_BYTES) as spool:
        for chunk in chunks:
            spool.write(chunk)
        spool.seek(0)
        with tarfile.open(fileobj=spool, mode="r:") as archive:
            sent = collect(channel, run_id, found_in_tar(archive, "."), inputs)
    return replace(outcome, files=tuple(sent.files), files_note=sent.note())


def _member(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.mode = mode
    member.size = size
    member.uid = member.gid = RUN_UID
    return member

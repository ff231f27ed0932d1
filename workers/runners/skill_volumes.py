"""The Spark runner's skill volumes: one Docker volume per content hash, filled and proven once.

A run's container mounts its skill read-only at /skill from a volume of the engine, never from a
path on this machine (the worker may itself run in a container, whose paths the engine can't
see). Filling a volume takes four engine calls, so it is done once per hash and kept:

- **Filled from proven bytes.** The files are read once from the package cache's folder; those
  bytes must hash to the run's content hash, and exactly those bytes are archived into a new
  volume through a container that never starts. The engine's copy is then read back through
  the same container and hashed again: only a volume whose files hash to the run's hash is
  ever used. A hash that doesn't match raises PackageUnverified and leaves no volume.
- **Only the volume this worker filled.** Each fill has a random id in the volume's name and
  in its `skillfleet.fill` label. After each run's container is created, the runner checks
  that the volume the container now holds carries that id. A volume removed and made again
  under the same name (by hand, by `docker volume prune`, by another worker's start, or by the
  engine itself, which creates an empty volume when a missing name is mounted) is never used:
  the container is removed, the volume too, and the hash is filled again. Volumes left by
  earlier workers are never adopted, whatever their labels say.
- **Race-safe.** Runs of one hash that start at once wait for a single fill; a volume in use by
  a run of this worker is never pruned, and the engine refuses to remove a volume any
  container holds.
- **Kept: the `keep` most recently used hashes** (KEEP_VOLUMES by default). When a run ends
  and more are held, the least recently used ones that no run is using are removed; a later
  run of a pruned hash fills a new volume.
- **Nothing left behind.** Volumes carry the `skillfleet.skill` label (the hash) and loader
  containers the run label, so a worker's start removes loaders left by a killed worker and
  every skill volume no container holds (one that a live container holds stays).

Whoever can reach the engine can change a volume's files in place, as they can change the
image; the runner trusts the engine, and proves what it hands to it.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
from docker.errors import DockerException, NotFound

from relay.errors import PackageUnverified
from store.hashing import hash_entries
from workers.runners.ownership import WORKER_LABEL, made_by_live_worker

SKILL_LABEL = "skillfleet.skill"  # the content hash the volume holds
FILL_LABEL = "skillfleet.fill"  # the id of the fill that made it
VOLUME_PREFIX = "skillfleet-skill-"
KEEP_VOLUMES = 32
FILL_LOCKS = 64
_ENGINE_ERRORS = (DockerException, requests.exceptions.RequestException)

Files = list[tuple[str, bytes]]


@dataclass
class SkillVolume:
    name: str
    skill_hash: str
    fill_id: str
    users: int = 0
    used_at: float = 0.0


class SkillVolumes:
    """The volumes this worker filled, by content hash."""

    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        image: str,
        mount: str,
        run_label: str,
        keep: int = KEEP_VOLUMES,
        worker: str = "",
    ) -> None:
        self._client = client
        self.image = image
        self.mount = mount
        self.run_label = run_label
        self.keep = keep
        # The worker's labels on what it makes (workers/runners/ownership.py).
        self.owner = {WORKER_LABEL: worker}
        self.fills = 0  # volumes filled by this worker, for tests and logs
        self._volumes: dict[str, SkillVolume] = {}
        self._lock = threading.Lock()
        self._fill_locks = [threading.Lock() for _ in range(FILL_LOCKS)]

    @property
    def client(self) -> docker.DockerClient:
        return self._client()

    def held(self) -> dict[str, str]:
        """Volume names by content hash."""
        with self._lock:
            return {h: volume.name for h, volume in self._volumes.items()}

    @contextmanager
    def use(self, skill_hash: str, folder: Path) -> Iterator[SkillVolume]:
        """The volume of `skill_hash`, filled from `folder` now if this worker has none.

        Raises PackageUnverified when the files don't hash to `skill_hash`, OSError or
        ValueError when they can't be read, or an engine error when the volume can't be made.
        """
        with self._fill_locks[hash(skill_hash) % FILL_LOCKS]:
            with self._lock:
                volume = self._volumes.get(skill_hash)
                if volume is not None:
                    volume.users += 1
            if volume is None:
                volume = self._fill(skill_hash, folder)
                with self._lock:
                    volume.users = 1
                    self._volumes[skill_hash] = volume
        try:
            yield volume
        finally:
            with self._lock:
                volume.users -= 1
                volume.used_at = time.monotonic()
            self.prune()

    def mounted(self, volume: SkillVolume) -> bool:
        """True when the engine's volume of that name is the one this worker filled."""
        try:
            labels = self.client.api.inspect_volume(volume.name).get("Labels") or {}
        except NotFound:
            return False
        return bool(
            labels.get(FILL_LABEL) == volume.fill_id
            and labels.get(SKILL_LABEL) == volume.skill_hash
        )

    def forget(self, volume: SkillVolume) -> None:
        """Stop using `volume` (it was replaced behind our back) and remove what has its name."""
        with self._lock:
            if self._volumes.get(volume.skill_hash) is volume:
                del self._volumes[volume.skill_hash]
        _remove_volume(self.client, volume.name)

    def prune(self) -> None:
        """Remove the least recently used volumes beyond `keep` that no run of ours uses.

        A volume a finished container still holds stays until a later prune (the runner prunes
        again once it removed its finished containers).
        """
        with self._lock:
            idle = sorted(
                (v for v in self._volumes.values() if v.users == 0), key=lambda v: v.used_at
            )
            extra = idle[: max(0, len(self._volumes) - self.keep)]
        for volume in extra:
            # A run that takes it meanwhile finds it gone or kept; `mounted` tells which.
            if _remove_volume(self.client, volume.name):
                with self._lock:
                    if self._volumes.get(volume.skill_hash) is volume:
                        del self._volumes[volume.skill_hash]

    def remove_unused(self) -> None:
        """Remove every skill volume no container holds and no live worker made (at start; the
        engine keeps the rest)."""
        for volume in self.client.volumes.list(filters={"label": SKILL_LABEL}):
            if not made_by_live_worker(volume.attrs.get("Labels")):
                _remove_volume(self.client, volume.name)

    def _fill(self, skill_hash: str, folder: Path) -> SkillVolume:
        files, folders = read_skill(folder)
        found = hash_entries(files)
        if found != skill_hash:
            raise PackageUnverified(
                f"The skill's copy for the container holds files that hash to {found[:12]}…, "
                f"not to the run's hash {skill_hash[:12]}…: it was planted or altered."
            )
        archive = skill_archive(files, folders)
        fill_id = uuid.uuid4().hex[:16]
        name = f"{VOLUME_PREFIX}{skill_hash[:16]}-{fill_id}"
        api = self.client.api
        api.create_volume(name, labels={**self.owner, SKILL_LABEL: skill_hash, FILL_LABEL: fill_id})
        try:
            loader = api.create_container(
                self.image,
                ["true"],
                labels={**self.owner, self.run_label: f"fill-{fill_id}"},
                host_config=api.create_host_config(
                    binds={name: {"bind": self.mount, "mode": "rw"}}, network_mode="none"
                ),
                network_disabled=True,
            )["Id"]
            try:
                if not api.put_archive(loader, self.mount, archive):
                    raise OSError("the engine refused the skill's archive")
                chunks, _ = api.get_archive(loader, f"{self.mount}/")
                found = hash_entries(archive_files(chunks))
            finally:
                _remove_container(self.client, loader)
            if found != skill_hash:
                raise PackageUnverified(
                    f"The skill's volume holds files that hash to {found[:12]}…, not to the "
                    f"run's hash {skill_hash[:12]}…, once the engine filled it."
                )
        except BaseException:
            _remove_volume(self.client, name)
            raise
        self.fills += 1
        return SkillVolume(name, skill_hash, fill_id)


def read_skill(folder: Path) -> tuple[Files, list[str]]:
    """Every regular file (relative POSIX path, bytes) and folder under `folder`, read once.

    Raises ValueError on anything else (the cache never holds links), OSError when unreadable.
    """
    files: Files = []
    folders: list[str] = []
    pending = [""]
    while pending:
        relative = pending.pop()
        with os.scandir(folder / relative if relative else folder) as found:
            for entry in found:
                path = f"{relative}/{entry.name}" if relative else entry.name
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    folders.append(path)
                    pending.append(path)
                elif stat.S_ISREG(mode):
                    files.append((path, Path(entry.path).read_bytes()))
                else:
                    raise ValueError(f"the skill holds something not a file: {path}")
    return sorted(files), sorted(folders)


def skill_archive(files: Files, folders: Iterable[str]) -> bytes:
    """An uncompressed tar of the files, owned by root: dirs 0755, files 0644."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in folders:
            info = tarfile.TarInfo(path)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in files:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def archive_files(chunks: Iterable[bytes]) -> Files:
    """The regular files of an engine archive of a folder, relative to that folder.

    Raises PackageUnverified when it holds anything but files and folders.
    """
    files: Files = []
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r") as tar:
        for member in tar:
            _, _, path = member.name.partition("/")  # the archive starts with the folder
            if member.isdir():
                continue
            if not member.isfile():
                raise PackageUnverified(f"The skill's volume holds {path}, which is not a file.")
            extracted = tar.extractfile(member)
            assert extracted is not None  # a regular file always has data
            files.append((path, extracted.read()))
    return files


def _remove_volume(client: docker.DockerClient, name: str) -> bool:
    """True once no volume has that name; False while a container holds it (or no engine)."""
    try:
        client.api.remove_volume(name)
    except NotFound:
        return True
    except _ENGINE_ERRORS:
        return False  # the engine keeps a volume a container holds; a later prune or start
    return True


def _remove_container(client: docker.DockerClient, container: str) -> None:
    try:
        client.api.remove_container(container, force=True)
    except NotFound:
        pass

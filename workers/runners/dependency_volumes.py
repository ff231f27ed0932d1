"""The Spark's declared dependencies: one Docker volume per resolved set of pins, mounted
read-only at /deps into every run of a skill version that declares them.

The run's container stays offline; the worker does what needs the package index. On a skill
version's first run its requirements (store/dependencies.py) are resolved with uv for the
runner image's Python and platform, which the worker asks the image once (a container that
prints them and the packages the image holds). Pins the image already holds at that version
are left out; the rest are installed here (wheels only) into a folder, archived into a new
volume through a loader container that never starts, and compiled to bytecode by a container
of the image (no network, no capabilities; it runs no package's code), since the runs' volume is
read-only. Volumes are keyed by the pins, shared by every skill that resolves alike, labelled
`skillfleet.deps`, and removed at a worker's start like the skill volumes; a failure ends the
run `dependencies_unavailable` with uv's reason, and leaves no volume.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import requests
from docker.errors import DockerException, NotFound

from store.dependencies import declared_for
from store.resolver import ResolutionFailed, Target, install, pins_key, resolve
from workers.runners.environments import DependenciesUnavailable, missing_pins, normal_name
from workers.runners.interpreters import PYTHON, python_path
from workers.runners.ownership import WORKER_LABEL, made_by_live_worker

DEPS_LABEL = "skillfleet.deps"  # the key of the pins a volume holds
DEPS_MOUNT = "/deps"
VOLUME_PREFIX = "skillfleet-deps-"
# The manylinux level wheels are picked for (the image's glibc is newer).
MANYLINUX = "manylinux_2_36"
_ENGINE_ERRORS = (DockerException, requests.exceptions.RequestException)
_FACTS = (
    "import json, platform, sys, importlib.metadata as m; print(json.dumps({"
    "'python': '%d.%d' % sys.version_info[:2], 'machine': platform.machine(), "
    "'packages': {d.metadata['Name']: d.version for d in m.distributions()}}))"
)


class DependencyVolumes:
    """Declared dependencies' volumes on this worker's engine, by skill hash."""

    def __init__(
        self,
        client: Callable[[], docker.DockerClient],
        image: str,
        run_label: str,
        index: str | None = None,
        worker: str = "",
    ) -> None:
        self._client = client
        self.image = image
        self.run_label = run_label
        self.index = index
        # The worker's labels on what it makes (workers/runners/ownership.py).
        self.owner = {WORKER_LABEL: worker}
        self.builds = 0  # volumes filled by this worker, for tests and logs
        self._volumes: dict[str, str | None] = {}  # skill hash -> volume (None: none needed)
        self._by_key: dict[str, str] = {}  # pins key -> volume
        self._facts: tuple[Target, dict[str, str]] | None = None
        self._lock = threading.Lock()

    @property
    def client(self) -> docker.DockerClient:
        return self._client()

    def volume_for(self, skill_hash: str, folder: Path) -> str | None:
        """The volume of the skill's declared dependencies, filled now if need be; None when it
        declares none, or the image holds them all.

        Raises DependenciesUnavailable with the reason when they can't be installed.
        """
        if skill_hash in self._volumes:
            return self._volumes[skill_hash]
        declared = declared_for(str(folder), skill_hash)
        volume = None
        if declared:
            with self._lock:  # one build at a time: each takes the engine and the index
                volume = self._volume(declared.requirements)
        self._volumes[skill_hash] = volume
        return volume

    def remove_unused(self) -> None:
        """Remove every dependency volume no container holds and no live worker made (at the
        worker's start)."""
        for volume in self.client.volumes.list(filters={"label": DEPS_LABEL}):
            if made_by_live_worker(volume.attrs.get("Labels")):
                continue  # another live worker's, held or about to be
            try:
                volume.remove()
            except _ENGINE_ERRORS:
                pass  # a live container holds it

    def _volume(self, requirements: tuple[str, ...]) -> str | None:
        try:
            target, installed = self._image_facts()
            pins = missing_pins(resolve(requirements, target, self.index), installed)
        except ResolutionFailed as e:
            raise DependenciesUnavailable(
                f"The skill's declared dependencies could not be installed: {e.message}"
            ) from e
        if not pins:
            return None
        key = pins_key(pins, target)
        if key not in self._by_key:
            self._by_key[key] = self._fill(key, pins, target)
        return self._by_key[key]

    def _image_facts(self) -> tuple[Target, dict[str, str]]:
        """The image's Python version, platform and packages, asked once."""
        if self._facts is None:
            try:
                output = self.client.containers.run(
                    self.image, ["python3", "-I", "-c", _FACTS], remove=True,
                    network_disabled=True, network_mode="none", read_only=True,
                    cap_drop=["ALL"], security_opt=["no-new-privileges"], user="65534:65534",
                    labels={**self.owner, self.run_label: "deps-facts"},
                )  # fmt: skip
                facts = json.loads(output)
            except (*_ENGINE_ERRORS, ValueError) as e:
                raise DependenciesUnavailable(
                    f"The runner image {self.image} could not say which Python it has: {e}"
                ) from e
            target = Target(
                python_version=facts["python"], platform=f"{facts['machine']}-{MANYLINUX}"
            )
            packages = {normal_name(n): v for n, v in facts["packages"].items() if n}
            self._facts = (target, packages)
        return self._facts

    def _fill(self, key: str, pins: list[str], target: Target) -> str:
        with tempfile.TemporaryDirectory(prefix="skillfleet-deps-") as staging:
            folder = Path(staging) / "deps"
            try:
                install(pins, folder, target, self.index, compile_bytecode=False)
            except ResolutionFailed as e:
                raise DependenciesUnavailable(
                    f"The skill's declared dependencies could not be installed: {e.message}"
                ) from e
            archive = _archive(folder)
        name = f"{VOLUME_PREFIX}{key}-{uuid.uuid4().hex[:8]}"
        api = self.client.api
        try:
            api.create_volume(name, labels={**self.owner, DEPS_LABEL: key})
            self._load(name, archive)
        except BaseException:
            _remove_volume(self.client, name)
            raise
        self.builds += 1
        return name

    def _load(self, name: str, archive: bytes) -> None:
        """Put the files in the volume, then compile them with the image's Python."""
        api = self.client.api
        binds = {name: {"bind": DEPS_MOUNT, "mode": "rw"}}
        loader = api.create_container(
            self.image, ["true"], labels={**self.owner, self.run_label: f"deps-{name}"},
            host_config=api.create_host_config(binds=binds, network_mode="none"),
            network_disabled=True,
        )["Id"]  # fmt: skip
        try:
            if not api.put_archive(loader, DEPS_MOUNT, archive):
                raise DependenciesUnavailable("The engine refused the dependencies' archive.")
        finally:
            api.remove_container(loader, force=True)
        try:
            self.client.containers.run(
                self.image, ["python3", "-m", "compileall", "-q", DEPS_MOUNT], remove=True,
                user="0:0", network_disabled=True, network_mode="none", read_only=True,
                cap_drop=["ALL"], security_opt=["no-new-privileges"],
                volumes={name: {"bind": DEPS_MOUNT, "mode": "rw"}},
                labels={**self.owner, self.run_label: f"deps-{name}"},
            )  # fmt: skip
        except _ENGINE_ERRORS:
            pass  # a module that does not compile here is compiled in memory when imported


def _archive(folder: Path) -> bytes:
    """An uncompressed tar of `folder`'s contents, owned by root: dirs 0755, files 0644 (0755
    for executables)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for root, dirs, files in os.walk(folder):
            for name in sorted(dirs) + sorted(files):
                path = Path(root, name)
                info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                if info.isdir():
                    info.mode = 0o755
                    tar.addfile(info)
                elif info.isfile():
                    info.mode = 0o755 if info.mode & 0o100 else 0o644
                    with open(path, "rb") as handle:
                        tar.addfile(info, handle)
                elif info.issym():
                    tar.addfile(info)
    return buffer.getvalue()


def _remove_volume(client: docker.DockerClient, name: str) -> None:
    try:
        client.api.remove_volume(name, force=True)
    except (NotFound, *_ENGINE_ERRORS):
        pass


def options(volume: str | None, script: str, skill_mount: str) -> dict[str, Any]:
    """What a run's container adds for its script: the volume mounted read-only, and Python's
    import path (workers/runners/interpreters.py)."""
    added: dict[str, Any] = {"volumes": {}, "environment": {}}
    if volume is not None:
        added["volumes"][volume] = {"bind": DEPS_MOUNT, "mode": "ro"}
    if script.endswith(PYTHON):
        deps = DEPS_MOUNT if volume is not None else None
        added["environment"]["PYTHONPATH"] = python_path(skill_mount, script, deps)
    return added

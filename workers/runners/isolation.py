"""Where and as whom a node runs a script: a folder of the run's own and, unless the operator
opted out, a uid of the run's own in namespaces of its own.

A run's folder, `<runs>/<run id>/`, holds `work/` (the script's working directory), `skill/` (a
read-only copy of the verified skill) and `tmp/` (its TMPDIR and HOME); it goes with the run.
A root worker makes these folders on a tmpfs only it and its runs see (`private_tmpfs`).

- **A uid per run** (`SKILLFLEET_NODE_RUN_AS=uid`, the default; the worker must be root): each
  run leases a uid of `SKILLFLEET_RUN_UIDS` that no other running run holds on this host (an
  flock on the uid's lock file, so every worker on the host shares the pool), owns its folder
  with it, and starts through skillfleet-launch `-u` (or util-linux's unshare and setpriv):
  PID, mount and IPC namespaces of its own, its own /proc and /dev/shm, no groups, no new
  privileges. It can't see or read other runs' processes and environments (their secrets),
  the worker's (its token), the data folder (0700) or other runs' folders (0700 each), and
  nothing it started outlives it. Its files are its own (umask 077: what it writes to the shared
  /tmp while it runs, no other run reads); what it left at the top of the folders open to
  all (/tmp, /var/tmp, /dev/shm, /run/lock, /var/crash) is removed.
- **The worker's user** (`SKILLFLEET_NODE_RUN_AS=worker`): scripts run as the worker, as an
  administrator's node needs (a script that must be root); such a node may have one owner only.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import random
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from relay.errors import RunError
from store.settings import DEFAULT_RUN_UIDS as DEFAULT_UIDS

RUN_AS_UID = "uid"
RUN_AS_WORKER = "worker"
RUN_AS = (RUN_AS_UID, RUN_AS_WORKER)
# The heartbeat feature that tells the API how a node runs scripts (broker/fleet.py reads it).
FEATURE = {RUN_AS_UID: "run-uids", RUN_AS_WORKER: "worker-user"}
# Isolation a run reports: its own uid and namespaces, or a process of the worker's user.
ISOLATION = {RUN_AS_UID: "uid", RUN_AS_WORKER: "process"}

RUNS_MODE = 0o711  # others may pass through to their own run's folder, never list it
PRIVATE = 0o700
SKILL_DIR_MODE = 0o755  # the skill's copy: readable by the run, writable by no one but root
SKILL_FILE_MODE = 0o644
LOCKS = ".uids"
# The folders open to every user that a run's uid may leave files in, removed once it ended:
# the temporary ones, /dev/shm (the host's when util-linux's unshare starts the run;
# skillfleet-launch gives each run its own), the lock folder (Debian's /run/lock, /var/lock
# leads there) and Ubuntu's crash reports. Those a host lacks are passed over.
SWEPT = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/crash")
SWEEP_DEPTH = 2  # temporary folders within those, and within them, are swept too
TMPFS_OFF = "off"
# mount(2) and unshare(2) flags (linux/mount.h, linux/sched.h).
CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_SLAVE = 0x2, 0x4, 0x4000, 0x80000


class NoFreeUid(RunError):
    """Raised when every uid of the pool is held by a running run on this host."""

    code = "no_free_uid"
    status = 503


@dataclass(frozen=True)
class RunPlace:
    """A run's folder as its script sees it, and the uid it runs as (None: the worker's)."""

    root: Path
    uid: int | None

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def skill(self) -> Path:
        return self.root / "skill"

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"


def default_runs_dir() -> Path:
    return Path(tempfile.gettempdir()) / "skillfleet-runs"


def unusable(run_as: str) -> str | None:
    """Why this process can't run scripts as `run_as` asks, or None when it can."""
    if run_as == RUN_AS_UID and os.geteuid() != 0:
        return (
            "it gives every run a uid of its own, which needs a worker running as root; start "
            "it as root, or set SKILLFLEET_NODE_RUN_AS=worker to run scripts as this user (the "
            "node may then have one owner only)"
        )
    return None


class UidPool:
    """Uids for runs, each leased by one running run on this host at a time.

    A lease is an exclusive flock on the uid's lock file: it ends with the run, or with its
    worker's process, so a crashed worker leaks no uid.
    """

    def __init__(self, folder: Path, first: int, last: int) -> None:
        if not 0 < first <= last:
            raise ValueError("a uid pool is a range of uids other than root's")
        self.folder = folder
        self.first, self.last = first, last
        # The lock files are found from this folder's descriptor: the worker may mount its
        # runs' tmpfs over the folder above it (`private_tmpfs`), and the locks must stay the
        # ones every worker on the host shares.
        self._folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._next = random.randrange(first, last + 1)  # noqa: S311 - spreading, not secrecy
        self._lock = threading.Lock()

    @contextmanager
    def lease(self) -> Iterator[int]:
        fd, uid = self._take()
        try:
            yield uid
        finally:
            os.close(fd)

    def _take(self) -> tuple[int, int]:
        size = self.last - self.first + 1
        with self._lock:
            start = self._next
            self._next = self.first + (start - self.first + 1) % size
        for step in range(size):
            uid = self.first + (start - self.first + step) % size
            fd = os.open(
                str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600, dir_fd=self._folder_fd
            )
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd, uid
        raise NoFreeUid(f"All {size} uids for runs on this node are in use; try again later.")


class RunSpace:
    """Makes each run's folder, as the run's uid (leased here) or the worker's user."""

    def __init__(self, runs_dir: Path, run_as: str = RUN_AS_WORKER, uids: UidPool | None = None):
        if run_as == RUN_AS_UID and uids is None:
            raise ValueError("a uid per run needs a pool of uids")
        self.runs_dir = runs_dir
        self.run_as = run_as
        self.uids = uids

    @classmethod
    def of(
        cls, runs_dir: Path, run_as: str, first: int = DEFAULT_UIDS[0], last: int = DEFAULT_UIDS[1]
    ) -> RunSpace:
        """The space of a worker: its folders made, private to root where runs have uids."""
        runs_dir.mkdir(parents=True, exist_ok=True)
        if run_as != RUN_AS_UID:
            return cls(runs_dir, run_as)
        runs_dir.chmod(RUNS_MODE)
        blocked = unreachable(runs_dir)
        if blocked is not None:
            raise RunError(
                f"The runs' folder {runs_dir} can't be reached by the runs' uids: {blocked} is "
                "closed to other users. Set SKILLFLEET_RUN_DIR to a folder every user may pass "
                "through (the default is skillfleet-runs in the system's temp folder)."
            )
        locks = runs_dir / LOCKS
        locks.mkdir(mode=PRIVATE, exist_ok=True)
        locks.chmod(PRIVATE)
        return cls(runs_dir, run_as, UidPool(locks, first, last))

    @property
    def isolation(self) -> str:
        return ISOLATION[self.run_as]

    def folder_of(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def make(self, run_id: str, skill: Path | None) -> tuple[RunPlace, Callable[[], None]]:
        """The run's folder with a copy of `skill` (None: a command's run, no skill), and what
        clears it once the run ended: removes the folder with everything in it and what the
        run's uid left in /tmp, then frees the uid."""
        lease = contextlib.ExitStack()
        try:
            uid = lease.enter_context(self.uids.lease()) if self.uids is not None else None
            place = _made(self.folder_of(run_id), skill, uid)
        except BaseException:
            lease.close()
            raise

        def clear() -> None:
            with lease:
                shutil.rmtree(place.root, ignore_errors=True)
                if uid is not None:
                    sweep(uid)

        return place, clear


def private_tmpfs(runs_dir: Path, size: str) -> str | None:
    """Put the runs' folder on a tmpfs that only this worker and its runs see: this process
    moves to a mount namespace of its own (host mounts still reach it, its own reach no one
    else) and mounts a tmpfs of `size` (a tmpfs `size=`: bytes with k, m or g, or a % of
    memory) on `runs_dir`. A run's folder is then made and removed in memory, not on a disk's
    journal, and goes with the worker's processes whatever ends them.

    Must run before this process starts a thread: a mount namespace is the calling thread's.
    Returns None once done, else why the folder stays where it is (the caller says so)."""
    threads = _threads()
    if threads != 1:
        return f"the worker has {threads} threads already; a mount namespace needs it alone"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_char_p]  # fmt: skip
    libc.unshare.argtypes = [ctypes.c_int]
    if libc.unshare(CLONE_NEWNS) != 0:
        return f"no mount namespace of its own: {os.strerror(ctypes.get_errno())}"
    if libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None) != 0:
        return f"its mounts could not be made its own: {os.strerror(ctypes.get_errno())}"
    options = f"mode={RUNS_MODE:o},size={size}".encode()
    target = os.fsencode(runs_dir)
    if libc.mount(b"tmpfs", target, b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        return f"the tmpfs could not be mounted: {os.strerror(ctypes.get_errno())}"
    return None


def _threads() -> int:
    """The threads of this process, native ones included."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def _made(root: Path, skill: Path | None, uid: int | None) -> RunPlace:
    """A run's folder, made whole or not at all."""
    place = RunPlace(root, uid)
    if os.path.lexists(place.root):  # what a killed worker's keeper had no time to remove
        shutil.rmtree(place.root, ignore_errors=True)
    place.root.mkdir(mode=PRIVATE)
    try:
        for folder in (place.work, place.tmp):
            folder.mkdir(mode=PRIVATE)
        if skill is not None:
            copy_skill(skill, place.skill)
        if uid is not None:
            for path in (place.root, place.work, place.tmp):
                os.chown(path, uid, uid)
    except BaseException:
        shutil.rmtree(place.root, ignore_errors=True)
        raise
    return place


def unreachable(folder: Path) -> Path | None:
    """The first folder above `folder` (itself included) that others may not pass through."""
    for path in (folder.resolve(), *folder.resolve().parents):
        if not os.stat(path).st_mode & stat.S_IXOTH:
            return path
    return None


def copy_skill(source: Path, target: Path) -> None:
    """Copy the verified folder `source` (regular files and folders only) to `target`, readable
    by anyone who may enter the run's folder and writable by no one but root."""
    target.mkdir(mode=SKILL_DIR_MODE)
    target.chmod(SKILL_DIR_MODE)
    for folder, dirs, files in os.walk(source):
        relative = Path(folder).relative_to(source)
        for name in dirs:
            made = target / relative / name
            made.mkdir(mode=SKILL_DIR_MODE)
            made.chmod(SKILL_DIR_MODE)
        for name in files:
            copied = target / relative / name
            shutil.copyfile(Path(folder) / name, copied, follow_symlinks=False)
            copied.chmod(SKILL_FILE_MODE)


def _temporary(mode: int) -> bool:
    """A folder every user may write in, each only removing their own: /tmp's kind."""
    return bool(mode & stat.S_IWOTH and mode & stat.S_ISVTX)


def sweep(uid: int, folders: tuple[str, ...] = SWEPT, depth: int = SWEEP_DEPTH) -> None:
    """Remove what `uid` left in the folders open to every user: the next run that leases it
    may be another owner's. Its processes are gone (its PID namespace ended). A temporary
    folder of another user's within them (open to all and sticky, as /tmp/.X11-unix) is swept
    the same way, down to `depth` such folders (another run's uid could nest them without
    end); a folder an operator opened to runs (not sticky) keeps what runs put there."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid != uid:
                if depth > 0 and stat.S_ISDIR(info.st_mode) and _temporary(info.st_mode):
                    sweep(uid, (entry.path,), depth - 1)
                continue
            if stat.S_ISDIR(info.st_mode):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

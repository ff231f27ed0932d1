"""Proof that a skill folder holds exactly the files of a content hash, before anything runs it.

Every runner gets its files through here: the package cache proves each `<name>@<hash>` folder
before a run uses it, and the Spark and sandbox runners prove the copy they hand to a container
or micro-VM. A proof is the DESIGN.md content hash (store/hashing.py); `FolderVerifier`
remembers it per folder together with a fingerprint of the folder's identity and of every entry
in it, so a repeated run pays a few `lstat` calls instead of reading every file again. The
fingerprint holds each entry's inode and change time (ctime), which any write, rename, chmod or
`utime` moves and which no unprivileged process can set back, so an edit invalidates the proof.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

from relay.errors import PackageUnverified
from store.hashing import content_hash

# Proofs kept per process; a node holds at most a few hundred packages.
MAX_PROOFS = 1024

Fingerprint = tuple[tuple[str, int, int, int, int, int], ...]


def fingerprint(folder: Path) -> Fingerprint:
    """Identity of `folder` and of every entry under it: (path, kind, size, inode, mtime, ctime).

    Raises PackageUnverified when `folder` is not a real folder or holds anything but regular
    files and folders: the content hash skips links, so a link could change a run unnoticed.
    """
    try:
        root = os.lstat(folder)
    except OSError as e:
        raise PackageUnverified(f"The skill folder can't be read: {e.strerror}.") from e
    if not stat.S_ISDIR(root.st_mode):
        raise PackageUnverified("The skill folder is not a folder (a link or a file).")
    entries = [("", 0, root.st_dev, root.st_ino, root.st_mtime_ns, root.st_ctime_ns)]
    pending = [""]
    try:
        while pending:
            relative = pending.pop()
            with os.scandir(folder / relative if relative else folder) as found:
                for entry in found:
                    path = f"{relative}/{entry.name}" if relative else entry.name
                    info = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(path)
                    elif not stat.S_ISREG(info.st_mode):
                        raise PackageUnverified(
                            f"The skill folder holds {path}, which is not a regular file."
                        )
                    kind = 0 if stat.S_ISDIR(info.st_mode) else 1
                    size = info.st_size if kind else 0
                    entries.append(
                        (path, kind, size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)
                    )
    except OSError as e:
        raise PackageUnverified(f"The skill folder can't be read: {e.strerror}.") from e
    return tuple(sorted(entries))


def verify_folder(folder: Path, expected: str, what: str = "The skill folder") -> None:
    """Prove `folder` has the content hash `expected`, reading every file; no proof is kept.

    Raises PackageUnverified naming `what` when it does not, or when it changed meanwhile.
    """
    _prove(folder, expected, what)


def _prove(folder: Path, expected: str, what: str) -> Fingerprint:
    """The folder's fingerprint, once its files were read and hashed to `expected`."""
    before = fingerprint(folder)
    try:
        found = content_hash(folder)
    except OSError as e:
        raise PackageUnverified(f"{what} can't be read: {e.strerror}.") from e
    if found != expected:
        raise PackageUnverified(
            f"{what} holds files that hash to {found[:12]}…, not to the run's hash "
            f"{expected[:12]}…: it was planted or altered."
        )
    if fingerprint(folder) != before:
        raise PackageUnverified(f"{what} changed while it was being verified.")
    return before


class FolderVerifier:
    """Proves folders against content hashes and remembers each proof until the folder changes."""

    def __init__(self, max_proofs: int = MAX_PROOFS) -> None:
        self.max_proofs = max_proofs
        self.hashed = 0  # folders read in full: the proofs that were not remembered
        self._proofs: dict[str, tuple[str, Fingerprint]] = {}
        self._lock = threading.Lock()

    def verify(self, folder: Path, expected: str, what: str = "The skill folder") -> None:
        """Prove `folder` has the content hash `expected`; a remembered proof costs one walk.

        Raises PackageUnverified when it does not, and forgets any earlier proof of it.
        """
        key = os.fspath(folder)
        try:
            current = fingerprint(folder)
            with self._lock:
                if self._proofs.get(key) == (expected, current):
                    return
                self.hashed += 1
            proven = _prove(folder, expected, what)
        except PackageUnverified:
            self.forget(folder)
            raise
        with self._lock:
            self._proofs.pop(key, None)
            self._proofs[key] = (expected, proven)
            while len(self._proofs) > self.max_proofs:
                del self._proofs[next(iter(self._proofs))]  # the oldest proof

    def forget(self, folder: Path) -> None:
        """Drop the proof of `folder` (it was removed or replaced)."""
        with self._lock:
            self._proofs.pop(os.fspath(folder), None)

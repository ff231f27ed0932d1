"""A micro-VM's folders on this host, and how a run's files pass through them.

The guest sees two folders: `/input` (the skill, read-only) and `/output` (writable, the run's
working directory). Hyperlight empties `/output` before each run and at each restore, so the
call's files can't wait there: they are fetched into the VM's `inbox`, which the guest never
sees, and moved into `/output` by a host tool the guest program calls first thing, after the
run's own emptying. When the run ends, and before the snapshot is restored, everything left in
`/output` moves to the VM's `outbox`, from where the worker sends back what the run created or
changed (workers/runfiles.py: the same caps and notes as on a node). Moves, not copies: the
folders share one file system.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class VmFolders:
    """The folders of one micro-VM, all under `root` (made and removed by the worker)."""

    root: Path

    @property
    def input(self) -> Path:
        """The guest's `/input`: the skill's verified copy."""
        return self.root / "input"

    @property
    def output(self) -> Path:
        """The guest's `/output`: the run's working directory."""
        return self.root / "output"

    @property
    def inbox(self) -> Path:
        """The call's files, waiting for the guest program to ask for them."""
        return self.root / "inbox"

    @property
    def outbox(self) -> Path:
        """What the last run left in `/output`, taken out before the restore."""
        return self.root / "outbox"

    def make(self) -> VmFolders:
        for folder in (self.input, self.output, self.inbox, self.outbox):
            folder.mkdir(mode=0o700, exist_ok=True)
        return self


def move_entries(source: Path, target: Path) -> None:
    """Move every entry of `source` into `target` (links moved as links, never followed)."""
    for entry in os.scandir(source):
        destination = target / entry.name
        if destination.exists() or destination.is_symlink():
            empty_entry(destination)
        os.replace(entry.path, destination)


def empty(folder: Path) -> None:
    """Remove what `folder` holds; the folder stays (a micro-VM may hold it open)."""
    for entry in os.scandir(folder):
        empty_entry(Path(entry.path))


def empty_entry(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()

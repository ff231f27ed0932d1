"""Edits: a skill's files changed by one atomic install of an edited copy, never in place.

The copy is made in the store's staging folder, changed, checked like an import and installed
by one rename, but only while the skill still has the hash the edit was made against.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Mapping
from pathlib import Path

from store.archive import Staging
from store.drafts import check_path, encoded
from store.errors import (
    InvalidResourcePath,
    ResourceNotFound,
    SkillBuiltin,
    SkillChanged,
)
from store.hashing import content_hash, regular_files
from store.models import Skill
from store.paths import inside
from store.skills import Origin, SkillStore
from store.validation import SkillInfo
from store.versions import Made

# path -> the file's new text, or None to delete it
FileChanges = Mapping[str, str | None]


def changed_message(name: str, base_hash: str, now: str | None) -> str:
    where = f"its hash is now {now}" if now else "it was removed"
    return f"'{name}' changed since the edit was made against {base_hash[:8]}: {where}."


def edited_copy(store: SkillStore, skill: Skill, stage: Path, changes: FileChanges) -> Path:
    """A copy of the skill in `stage` with `changes` applied; raises SkillChanged if it moved."""
    root = copy_of(store, skill, stage)
    apply_changes(root, changes)
    return root


def copy_of(store: SkillStore, skill: Skill, stage: Path) -> Path:
    """A copy of the skill's folder in `stage`, checked to be exactly the content `skill` names."""
    root = inside(stage, skill.name)
    shutil.copytree(store.folder(skill), root, symlinks=True)
    now = content_hash(root)
    if now != skill.hash:
        raise SkillChanged(changed_message(skill.name, skill.hash, now))
    return root


def apply_changes(root: Path, changes: FileChanges) -> None:
    """Write and delete files in the copy at `root`, then check it like an import's entries."""
    for path, text in sorted(changes.items()):
        target = root.joinpath(*check_path(path))
        if text is None:
            _delete(root, target, path)
        else:
            _write(root, target, path, text)
    staging = Staging()  # the edited folder once more through an import's checks
    for rel in regular_files(root):
        staging.add_file(tuple(rel.split("/")), (root / rel).stat().st_size)


def _delete(root: Path, target: Path, path: str) -> None:
    if target.is_symlink() or not target.is_file():
        raise ResourceNotFound(f"The skill has no file '{path}' to delete.")
    target.unlink()
    parent = target.parent
    while parent != root:
        with contextlib.suppress(OSError):
            parent.rmdir()  # only folders the deletion left empty
        parent = parent.parent


def _write(root: Path, target: Path, path: str, text: str) -> None:
    parent = target.parent
    for folder in (parent, *parent.parents):
        if folder == root:
            break
        if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
            raise InvalidResourcePath(f"'{path}' would go inside a file, not a folder.")
    if target.is_symlink() or target.is_dir():
        raise InvalidResourcePath(f"'{path}' is a folder or a link, not a file.")
    parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(encoded(text, path))


def install_edit(
    store: SkillStore,
    owner_id: int,
    name: str,
    base_hash: str,
    changes: FileChanges,
    *,
    by_owner: bool,
) -> Skill:
    """Write `changes` to the owner's skill `name` if it still has `base_hash`; one install.

    An edit keeps the skill's switch, author and notes; an owner's edit locks an assistant
    draft, so a later draft can no longer replace it.
    """
    skill = store.get(owner_id, name)
    if skill.read_only:
        raise SkillBuiltin(
            f"'{name}' is a read-only {skill.source} skill; duplicate it to change a copy."
        )
    if skill.hash != base_hash:
        raise SkillChanged(changed_message(name, base_hash, skill.hash))

    def guard(existing: Skill | None) -> None:
        if existing is None or existing.hash != base_hash:
            now = existing.hash if existing is not None else None
            raise SkillChanged(changed_message(name, base_hash, now))

    def annotate(row: Skill, info: SkillInfo) -> None:
        if by_owner:
            row.locked = True

    with store.staging() as stage:
        root = edited_copy(store, skill, stage, changes)
        origin = Origin(
            source=skill.source, origin=skill.origin, owner_id=owner_id, author=skill.author
        )
        return store.install(
            root,
            origin,
            enable=None,
            replace=True,
            expected_name=name,
            guard=guard,
            annotate=annotate,
            made=Made("edit", "owner" if by_owner else "assistant"),
        )

"""Archives and GitHub folders that hold many skills: find the skill folders, stage each one.

A skill folder is a folder holding SKILL.md that is not inside another skill folder. The whole
import is refused only when the archive is unsafe (a hostile name, a collision, a bomb, a
lying header); a skill folder over the limits, or holding a link or a device, is refused on
its own and the others go on.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from store.archive import (
    SKILL_FILE,
    Parts,
    Staging,
    check_zip_file,
    is_junk,
    open_zip,
    read_zip_entry,
    size_text,
    split_entry_name,
    write_tree,
    zip_entry_is_dir,
    zip_entry_name,
)
from store.errors import ArchiveUnsafe, SkillTooLarge, StoreError
from store.limits import MAX_BUNDLE_BYTES, MAX_BUNDLE_ENTRIES

Member = tuple[Parts, zipfile.ZipInfo, bool]  # path inside its skill folder, entry, is a folder


@dataclass(frozen=True)
class StagedSkill:
    """One skill folder of a bundle: staged at `root`, or refused with `error`."""

    folder: str
    root: Path | None = None
    error: StoreError | None = None


def skill_folders(files: Iterable[Parts]) -> list[Parts]:
    """The folders holding SKILL.md, less those inside another one (their SKILL.md is a file)."""
    found = sorted({parts[:-1] for parts in files if parts[-1] == SKILL_FILE}, key=len)
    kept: list[Parts] = []
    for folder in found:
        if not any(folder[: len(outer)] == outer for outer in kept):
            kept.append(folder)
    return sorted(kept)


def owner_of(parts: Parts, folders: Iterable[Parts]) -> Parts | None:
    """The skill folder an entry belongs to (the folder's own entry included), if any."""
    for folder in folders:
        if parts[: len(folder)] == folder:
            return folder
    return None


def bundle_whole(max_bytes: int = MAX_BUNDLE_BYTES) -> Staging:
    """The checks on every entry of a bundle: names, collisions and the bundle's bounds."""
    return Staging(
        subject="The import",
        max_files=MAX_BUNDLE_ENTRIES,
        max_file_bytes=max_bytes,
        max_bytes=max_bytes,
        max_entries=MAX_BUNDLE_ENTRIES,
    )


def over_bundle_bytes(total: int) -> SkillTooLarge | None:
    """The refusal of a skill that would take the import past its bytes bound, if it does."""
    if total <= MAX_BUNDLE_BYTES:
        return None
    return SkillTooLarge(
        f"The import is larger than {size_text(MAX_BUNDLE_BYTES)} with this skill; "
        "import it from its own folder."
    )


def zip_bundle_folders(data: bytes) -> list[Parts] | None:
    """The skill folders of a zip that holds skills other than at its root or in its one top
    folder; None for a single skill's zip, or one that can't be read (its checks say why)."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [info.filename for info in archive.infolist()]
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError):
        return None
    paths = [parts for parts in (tuple(n.removesuffix("/").split("/")) for n in names)]
    paths = [parts for parts in paths if not is_junk(parts)]
    folders = skill_folders(paths)
    tops = {parts[0] for parts in paths}
    if not folders or () in folders or (len(tops) == 1 and folders[0] == (*tops,)):
        return None
    return folders


def stage_zip_bundle(data: bytes, dest: Path, folders: list[Parts]) -> list[StagedSkill]:
    """Check every entry of the zip, then write each acceptable skill folder under `dest`.

    Raises ArchiveUnsafe or SkillTooLarge when the zip as a whole is refused; nothing is
    installed here, so a refusal leaves the store as it was.
    """
    archive = open_zip(data)
    with archive:
        members, unsafe = _zip_members(archive, folders)
        staged = []
        for index, folder in enumerate(folders):
            label = "/".join(folder)
            if folder in unsafe:
                staged.append(StagedSkill(label, error=unsafe[folder]))
                continue
            try:
                staging = stage_members(
                    (rel, info.file_size, d) for rel, info, d in members[folder]
                )
            except StoreError as e:
                staged.append(StagedSkill(label, error=e))
                continue
            files = {
                rel: read_zip_entry(archive, info, folder + rel)
                for rel, info, is_dir in members[folder]
                if not is_dir
            }
            target = dest / str(index) / folder[-1]
            target.parent.mkdir()
            write_tree(target, staging.dirs, files, dir_mode=0o755, file_mode=0o644)
            staged.append(StagedSkill(label, root=target))
    return staged


def stage_members(members: Iterable[tuple[Parts, int, bool]]) -> Staging:
    """One skill folder's entries (path inside it, size, is a folder) under the skill limits."""
    staging = Staging()
    for rel, size, is_dir in members:
        if is_dir:
            staging.add_dir(rel)
        else:
            staging.add_file(rel, size)
    return staging


def _zip_members(
    archive: zipfile.ZipFile, folders: list[Parts]
) -> tuple[dict[Parts, list[Member]], dict[Parts, ArchiveUnsafe]]:
    whole = bundle_whole()
    members: dict[Parts, list[Member]] = {folder: [] for folder in folders}
    unsafe: dict[Parts, ArchiveUnsafe] = {}
    for info in archive.infolist():
        name = zip_entry_name(info)
        parts = split_entry_name(name)
        if is_junk(parts):
            continue
        folder = owner_of(parts, folders)
        try:
            is_dir = zip_entry_is_dir(info, name)
        except ArchiveUnsafe as e:
            if folder is not None:  # a link outside every skill folder is never written
                unsafe.setdefault(folder, e)
            continue
        if is_dir:
            whole.add_dir(parts)
        else:
            check_zip_file(info, name)
            whole.add_file(parts, info.file_size)
        if folder is not None and parts != folder:
            members[folder].append((parts[len(folder) :], info, is_dir))
    return members, unsafe

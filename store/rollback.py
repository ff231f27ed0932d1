"""Rollback: an owned skill's kept version made current again, by one install of its files.

The version's files are put back together from the store of kept files in a staging folder,
checked to have its hash, and installed as an owner's edit is: one rename under the store's
lock, keeping the skill's switch, source and notes. Of concurrent rollbacks each is one
install in turn; one to the version that is already current changes nothing.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from store.errors import SkillBuiltin, SkillNotFound, VersionNotFound, VersionNotKept
from store.hashing import content_hash
from store.models import Skill, SkillVersion
from store.names import is_valid_hash
from store.paths import inside
from store.skills import Origin, SkillStore
from store.validation import SkillInfo
from store.versions import Blobs, Made, version_files


class _AlreadyCurrent(Exception):
    """The version became current while its files were put back (a concurrent rollback)."""


def rollback(
    store: SkillStore, owner_id: int, name: str, skill_hash: str, actor: str = "owner"
) -> Skill:
    """Make the owner's skill `name` have the kept version `skill_hash` again; the audit trail
    names `actor` as who asked."""
    skill = store.get(owner_id, name)
    if skill.read_only:
        raise SkillBuiltin(f"'{name}' is a read-only {skill.source} skill; it has no rollback.")
    if skill.hash == skill_hash:
        return skill
    with store.sessions() as session:
        version = _kept_version(session, skill, skill_hash)
        files = version_files(session, skill.id, skill_hash)
    made = Made(version.source or skill.source, version.author or skill.author)

    def guard(existing: Skill | None) -> None:
        if existing is None or existing.id != skill.id:
            raise SkillNotFound(f"No skill is named '{name}'.")
        if existing.hash == skill_hash:
            raise _AlreadyCurrent

    def annotate(row: Skill, info: SkillInfo) -> None:
        row.locked = True  # the owner chose this content, as an owner's edit does

    with store.staging() as stage:
        root = inside(stage, name)
        _put_back(store.blobs, root, files, name, skill_hash)
        origin = Origin(skill.source, skill.origin, owner_id, skill.author)
        try:
            return store.install(
                root,
                origin,
                enable=None,
                replace=True,
                expected_name=name,
                guard=guard,
                annotate=annotate,
                made=made,
                rollback_by=actor,
            )
        except _AlreadyCurrent:
            return store.get(owner_id, name)


def _kept_version(session: Session, skill: Skill, skill_hash: str) -> SkillVersion:
    version = None
    if is_valid_hash(skill_hash):
        version = session.get(SkillVersion, (skill.id, skill_hash))
    if version is None:
        raise VersionNotFound(
            f"'{skill.name}' has no version {skill_hash[:64]!r}; "
            f"GET /api/skills/{skill.name}/versions lists those it has."
        )
    if not version.kept:
        raise VersionNotKept(
            f"'{skill.name}' had version {skill_hash[:8]}, but its files were not kept "
            "(it is older than kept versions), so it can't be made current again."
        )
    return version


def _put_back(
    blobs: Blobs, root: Path, files: list[tuple[str, str]], name: str, skill_hash: str
) -> None:
    """The version's files written into `root`, checked to have its hash."""
    for path, digest in files:
        data = blobs.read(digest)
        if data is None:
            raise VersionNotKept(
                f"A file of '{name}' version {skill_hash[:8]} ({path}) is no longer stored; "
                "the version can't be made current again."
            )
        target = inside(root, *path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if content_hash(root) != skill_hash:
        raise VersionNotKept(
            f"The stored files of '{name}' version {skill_hash[:8]} no longer have its hash; "
            "the version can't be made current again."
        )

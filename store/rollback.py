"""Rollback: an owned skill's kept version made current again, by one install of its files.

The version's files are put back together from the store of kept files in a staging folder,
checked to have its hash, and installed as an owner's edit is: one rename under the store's
lock, keeping the skill's switch, source and notes. Of concurrent rollbacks each is one
install in turn; one to the version that is already current changes nothing.
"""

from __future__ import annotations

from store.errors import SkillBuiltin, SkillNotFound
from store.hashing import SIGNATURE_FILE
from store.models import Skill
from store.paths import inside
from store.skills import Origin, SkillStore
from store.validation import SkillInfo
from store.versions import Made, kept_version, put_back, version_files


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
        version = kept_version(session, skill, skill_hash)
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
        put_back(store.blobs, root, files, name, skill_hash)
        if version.signature is not None:  # judged again against the owner's keys of today
            (root / SIGNATURE_FILE).write_text(version.signature, encoding="ascii")
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

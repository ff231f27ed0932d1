"""Pinned versions: a skill as it was at one of its kept versions, for a call that pins it.

A job step may name its skill `name@<hash>`; while the skill is at another version the step
still runs that content. The version's files are put back together once from the store of
kept files into `<skills>/.versions/trees/<hash>/<name>/`, checked to have its hash, and never
written again: a folder is named by its content. The call is planned on a detached row that
reads like the skill with that folder and hash, so its scripts, their schemas, its declared
secrets and the package a worker fetches are all the pinned version's. The switch, the
owner's choice of where it runs and the signature's name come from the skill and its version.
A tree whose hash no kept version has any more is removed with the versions' files.
"""

from __future__ import annotations

import os
from pathlib import Path

from store.db import detached
from store.models import Skill
from store.paths import inside
from store.skills import SkillStore
from store.versions import TREES_DIR, kept_version, put_back, version_files


def pinned_view(store: SkillStore, skill: Skill, skill_hash: str) -> Skill:
    """`skill` at its kept version `skill_hash`: a detached row whose folder holds that version.

    Raises VersionNotFound when the skill never had the version (or it was trimmed), and
    VersionNotKept when its files are not kept.
    """
    if skill.hash == skill_hash:
        return skill
    with store.sessions() as session:
        version = kept_version(session, skill, skill_hash)
        files = version_files(session, skill.id, skill_hash)
        signed_by = version.signed_by
    folder = _tree(store, skill.name, skill_hash, files)
    values = {column: getattr(skill, column) for column in _COLUMNS}
    values.update(hash=skill_hash, location=str(folder), signed_by=signed_by)
    values.update(signature=None, signer_fingerprint=None, signature_hold=False)
    view = detached(Skill, values)
    info = store.info(view)  # the version's own SKILL.md: its tier and description
    view.tier = info.tier
    view.description = info.description
    view.execution = skill.execution_choice or info.execution
    return view


_COLUMNS = tuple(column.key for column in Skill.__table__.columns)


def _tree(store: SkillStore, name: str, skill_hash: str, files: list[tuple[str, str]]) -> Path:
    """The version's folder, put back together the first time a call needs it."""
    folder = inside(store.blobs.root / TREES_DIR, skill_hash, name)
    if folder.is_dir():
        return folder
    with store.staging() as stage:
        root = inside(stage, name)
        put_back(store.blobs, root, files, name, skill_hash)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(root, folder)
        except OSError:  # another call put it back first: the same files, by their hash
            if not folder.is_dir():
                raise
    return folder

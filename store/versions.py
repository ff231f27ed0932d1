"""Skill versions: each version's files kept by hash, listed, trimmed, and read back.

Every install records the version it makes, with its files (store/skills.py). A file is
stored once by its SHA-256 under `<skills>/.versions/<digest[:2]>/<digest>`, however many
versions (or owners' skills) hold it. A skill keeps its last `keep` versions, and always its
current one and those a job pins (a step's `name@<hash>`, a job grant's full hash). Files are
written and removed only under the skill store's lock, so a file no version lists any more
can be removed without racing an install that is about to list it. An install writes the
files of the version it recorded once its transaction committed: a refused install leaves none.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from store.db import SessionFactory
from store.errors import VersionNotFound, VersionNotKept
from store.hashing import content_hash, file_digest, hash_entries, regular_files
from store.models import Grant, Job, Skill, SkillVersion, SkillVersionFile, utcnow
from store.names import is_valid_hash, is_valid_name
from store.paths import inside

VERSIONS_DIR = ".versions"
# Kept versions put back together as folders, `<hash>/<name>/`, for calls that pin them.
TREES_DIR = "trees"
# The argument names a skill tool reads its skill from (broker/classify.py), in its order.
SKILL_ARGUMENTS = ("skill_name", "skillName", "name")
# The one tool whose calls may pin a version (broker/classify.py's RUN).
PIN_TOOL = "run_skill_script"


@dataclass(frozen=True)
class Made:
    """What made a version (upload, github, copy, draft, edit, builtin, path) and who
    (owner, assistant, operator, builtin)."""

    source: str
    author: str


class Blobs:
    """Files stored once by their SHA-256, for every kept version of every skill."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        if not is_valid_hash(digest):
            raise ValueError("a blob is named by a SHA-256 in lowercase hex")
        return self.root / digest[:2] / digest

    def put_all(self, files: Mapping[str, bytes]) -> None:
        """Store each digest's bytes (what `record` returned, once it was committed)."""
        for digest, data in sorted(files.items()):
            self.put(digest, data)

    def put(self, digest: str, data: bytes) -> None:
        """Store `data` under its digest, once; a file already there is the same bytes."""
        path = self.path(digest)
        if path.is_file():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{digest}.{uuid.uuid4().hex}.tmp")
        try:
            temp.write_bytes(data)
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)

    def read(self, digest: str) -> bytes | None:
        """The stored bytes, or None when they are gone or no longer match their digest."""
        try:
            data = self.path(digest).read_bytes()
        except FileNotFoundError:
            return None
        return data if file_digest(data) == digest else None

    def collect(self, session: Session, digests: Iterable[str]) -> None:
        """Remove each of `digests` no kept version lists any more (under the store's lock)."""
        for digest in sorted(set(digests)):
            listed = select(SkillVersionFile.digest).where(SkillVersionFile.digest == digest)
            if session.scalar(listed.limit(1)) is None:
                self.path(digest).unlink(missing_ok=True)


def record(
    session: Session, skill: Skill, made: Made, contents: Mapping[str, bytes] | None = None
) -> dict[str, bytes]:
    """Keep the skill's current hash among its versions, with its files (path -> bytes) when
    given; the bytes to store by digest (`Blobs.put_all`) once this is committed."""
    session.flush()  # a new skill gets its id
    row = session.get(SkillVersion, (skill.id, skill.hash))
    if row is None:
        row = SkillVersion(
            skill_id=skill.id,
            hash=skill.hash,
            seen_at=utcnow(),
            source=made.source,
            author=made.author,
            file_count=skill.file_count,
            size_bytes=skill.size_bytes,
            kept=False,
            signed_by=skill.signed_by,
            signature=skill.signature,
        )
        session.add(row)
        session.flush()
    pending: dict[str, bytes] = {}
    if contents is not None and not row.kept:
        for path, data in sorted(contents.items()):
            digest = file_digest(data)
            pending[digest] = data
            session.add(
                SkillVersionFile(skill_id=skill.id, hash=skill.hash, path=path, digest=digest)
            )
        row.kept = True
        session.flush()
    return pending


def keep_folder(session: Session, skill: Skill, folder: Path) -> dict[str, bytes]:
    """Keep the files of the skill's current version from its folder, if they are not kept
    yet (a version recorded before versions were kept) and still have its hash."""
    row = session.get(SkillVersion, (skill.id, skill.hash))
    if row is not None and row.kept:
        return {}
    contents = _folder_contents(folder)
    if contents is None or hash_entries(contents.items()) != skill.hash:
        return {}
    made = Made(
        (row.source if row else None) or skill.source, (row.author if row else None) or skill.author
    )
    return record(session, skill, made, contents)


def _folder_contents(folder: Path) -> dict[str, bytes] | None:
    try:
        return {rel: (folder / rel).read_bytes() for rel in regular_files(folder)}
    except OSError:
        return None


def trim(session: Session, skill: Skill, keep: int) -> set[str]:
    """Drop the skill's versions beyond the newest `keep`, but never its current one or one a
    job pins; the digests of their files, for `Blobs.collect` once this is committed."""
    rows = session.scalars(
        select(SkillVersion)
        .where(SkillVersion.skill_id == skill.id)
        .order_by(SkillVersion.seen_at.desc(), SkillVersion.hash)
    ).all()
    if len(rows) <= keep:
        return set()
    pinned = pinned_hashes(session, skill.owner_id, skill.name)
    dropped = [row.hash for row in rows[keep:] if row.hash != skill.hash and row.hash not in pinned]
    if not dropped:
        return set()
    files = (SkillVersionFile.skill_id == skill.id, SkillVersionFile.hash.in_(dropped))
    digests = set(session.scalars(select(SkillVersionFile.digest).where(*files)))
    session.execute(delete(SkillVersionFile).where(*files))
    session.execute(
        delete(SkillVersion).where(
            SkillVersion.skill_id == skill.id, SkillVersion.hash.in_(dropped)
        )
    )
    return digests


def digests_of(session: Session, skill_id: int) -> set[str]:
    """The digests of every kept file of a skill (to collect once the skill is deleted)."""
    query = select(SkillVersionFile.digest).where(SkillVersionFile.skill_id == skill_id)
    return set(session.scalars(query))


def pinned_hashes(session: Session, owner_id: int | None, name: str) -> set[str]:
    """The versions of the owner's skill `name` their jobs pin: in a step or a grant."""
    if owner_id is None:
        return set()
    found = set()
    for steps in session.scalars(select(Job.steps).where(Job.owner_id == owner_id)):
        for step in steps or []:
            pinned_name, skill_hash = parse_pin(step_skill(step))
            if pinned_name == name and skill_hash is not None:
                found.add(skill_hash)
    prefix = f"skill:{name}@"
    keys = select(Grant.key).where(
        Grant.owner_id == owner_id, Grant.scope == "job", Grant.key.startswith(prefix)
    )
    found.update(key.removeprefix(prefix) for key in session.scalars(keys))
    return found


def step_skill(step: Any) -> str | None:
    """The skill a job step's run_skill_script names, as written (perhaps `name@<hash>`)."""
    if not isinstance(step, dict) or step.get("tool") != PIN_TOOL:
        return None
    arguments = step.get("arguments")
    if not isinstance(arguments, dict):
        return None
    for key in SKILL_ARGUMENTS:
        if key in arguments:
            value = arguments[key]
            return value if isinstance(value, str) else None
    return None


def parse_pin(text: str | None) -> tuple[str | None, str | None]:
    """`name@<64-hex hash>` as (name, hash); a bare name as (name, None); anything else that
    holds an `@` as (None, None)."""
    if text is None:
        return None, None
    name, at, skill_hash = text.partition("@")
    if not at:
        return name, None
    if is_valid_name(name) and is_valid_hash(skill_hash):
        return name, skill_hash
    return None, None


def listing(sessions: SessionFactory, skill: Skill) -> list[SkillVersion]:
    """The skill's versions, newest first (then by hash, descending: a page's order)."""
    query = (
        select(SkillVersion)
        .where(SkillVersion.skill_id == skill.id)
        .order_by(SkillVersion.seen_at.desc(), SkillVersion.hash.desc())
    )
    with sessions() as session:
        return list(session.scalars(query))


def version_files(session: Session, skill_id: int, skill_hash: str) -> list[tuple[str, str]]:
    """The (path, digest) of each file of a kept version, by path."""
    query = (
        select(SkillVersionFile.path, SkillVersionFile.digest)
        .where(SkillVersionFile.skill_id == skill_id, SkillVersionFile.hash == skill_hash)
        .order_by(SkillVersionFile.path)
    )
    return [(path, digest) for path, digest in session.execute(query)]


def put_back(
    blobs: Blobs, root: Path, files: list[tuple[str, str]], name: str, skill_hash: str
) -> None:
    """The version's files written into `root`, checked to have its hash (a rollback, a
    pinned version's tree: store/pinned.py)."""
    for path, digest in files:
        data = blobs.read(digest)
        if data is None:
            raise VersionNotKept(
                f"A file of '{name}' version {skill_hash[:8]} ({path}) is no longer stored; "
                "the version can't be put back together."
            )
        target = inside(root, *path.split("/"))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    if content_hash(root) != skill_hash:
        raise VersionNotKept(
            f"The stored files of '{name}' version {skill_hash[:8]} no longer have its hash; "
            "the version can't be put back together."
        )


def collect_trees(session: Session, root: Path) -> None:
    """Remove the folders under `root` (TREES_DIR) of hashes no kept version has any more
    (under the store's lock: store/pinned.py puts them back together)."""
    if not root.is_dir():
        return
    for folder in root.iterdir():
        kept = select(SkillVersion.hash).where(
            SkillVersion.hash == folder.name, SkillVersion.kept.is_(True)
        )
        if session.scalar(kept.limit(1)) is None:
            shutil.rmtree(folder, ignore_errors=True)


def kept_version(session: Session, skill: Skill, skill_hash: str) -> SkillVersion:
    """The skill's version `skill_hash`, whose files are kept (a rollback, a pinned call)."""
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
            "(it is older than kept versions), so it can't be put back together."
        )
    return version

"""The skill store: folders on disk and their index in the database, changed together."""

from __future__ import annotations

import fcntl
import functools
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.db import SessionFactory, transaction
from store.errors import SkillBuiltin, SkillChanged, SkillExists, SkillNotFound, StoreFull
from store.hashing import content_hash, regular_files
from store.leniency import read_header, read_skill_dir
from store.limits import MAX_SKILLS
from store.models import Skill, utcnow
from store.resources import read_resource
from store.schemas import scripts_of
from store.skillmd import read_skill_md
from store.validation import SkillInfo

BUILTIN_DIR = Path(__file__).parent / "builtin"
READ_ONLY_SOURCES = ("builtin", "path")


@dataclass(frozen=True)
class Origin:
    """Where an installed skill came from and who put it there."""

    source: str
    origin: str | None = None
    owner_id: int | None = None
    author: str = "owner"


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int


class SkillStore:
    """Installs, lists, reads and removes skills; the only writer of the skills folder."""

    def __init__(self, sessions: SessionFactory, skills_dir: Path) -> None:
        self.sessions = sessions
        self.skills_dir = skills_dir
        self.skills_dir.mkdir(parents=True, exist_ok=True)
        (self.skills_dir / ".staging").mkdir(exist_ok=True)

    # -- reading -----------------------------------------------------------------

    def get(self, name: str) -> Skill:
        with self.sessions() as session:
            skill = session.get(Skill, name)
        if skill is None:
            raise SkillNotFound(f"No skill is named '{name}'.")
        return skill

    def installed(self, *, enabled_only: bool = False) -> list[Skill]:
        query = select(Skill).order_by(Skill.name)
        if enabled_only:
            query = query.where(Skill.enabled.is_(True))
        with self.sessions() as session:
            return list(session.scalars(query))

    def catalog(self) -> list[tuple[str, str]]:
        """Name and description of every enabled skill, from the index alone."""
        query = (
            select(Skill.name, Skill.description)
            .where(Skill.enabled.is_(True))
            .order_by(Skill.name)
        )
        with self.sessions() as session:
            return [(name, description) for name, description in session.execute(query)]

    def folder(self, skill: Skill) -> Path:
        return Path(skill.location) if skill.location else self.skills_dir / skill.name

    def info(self, skill: Skill) -> SkillInfo:
        """The parsed header of a skill, cached per content hash."""
        return _header_info(str(self.folder(skill)), skill.name, skill.hash)

    def scripts(self, skill: Skill) -> list[str]:
        return list(_scripts(str(self.folder(skill)), skill.hash))

    def files(self, skill: Skill) -> list[FileEntry]:
        root = self.folder(skill)
        return [FileEntry(rel, (root / rel).stat().st_size) for rel in regular_files(root)]

    def read_file(self, name: str, path: object, limit: int) -> tuple[str, bytes]:
        return read_resource(self.folder(self.get(name)), path, limit)

    # -- writing -----------------------------------------------------------------

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """An empty folder on the store's file system, removed afterwards whatever happens."""
        folder = self.skills_dir / ".staging" / uuid.uuid4().hex
        folder.mkdir(parents=True)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def install(
        self,
        root: Path,
        origin: Origin,
        *,
        enable: bool = True,
        replace: bool = False,
        expected_name: str | None = None,
        name: str | None = None,
        warnings: Sequence[str] = (),
    ) -> Skill:
        """Validate the staged folder `root` and move it into the store by one rename.

        The header is read as an import reads it (store/leniency.py): `expected_name` is the
        folder the skill came from (default: `root`'s name), `name` the name the user chose.
        Its warnings, and `warnings` from the import itself, are kept with the skill.
        """
        folder_name = expected_name if expected_name is not None else root.name
        info = read_skill_dir(root, folder_name, name)
        skill_hash = content_hash(root)
        files = regular_files(root)
        size = sum((root / rel).stat().st_size for rel in files)
        with self._locked(), transaction(self.sessions) as session:
            existing = session.get(Skill, info.name)
            self._check_can_install(session, existing, info, replace)
            final = self.skills_dir / info.name
            trash = self._move_aside(final)
            root.rename(final)
            try:
                skill = existing or Skill(name=info.name, created_at=utcnow(), revision=0)
                _fill(skill, info, origin, skill_hash, len(files), size)
                skill.warnings = [*warnings, *info.warnings]
                skill.enabled = enable
                session.add(skill)
                session.flush()
            except BaseException:
                final.rename(root)
                if trash is not None:
                    trash.rename(final)
                raise
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        return skill

    def _check_can_install(
        self, session: Session, existing: Skill | None, info: SkillInfo, replace: bool
    ) -> None:
        name = info.name
        if existing is not None:
            if existing.read_only:
                raise SkillBuiltin(f"'{name}' is a read-only {existing.source} skill.")
            if not replace:
                raise SkillExists(_exists_message(info))
            return
        count = session.scalar(select(func.count()).select_from(Skill)) or 0
        if count >= MAX_SKILLS:
            raise StoreFull(f"The store already holds {MAX_SKILLS} skills, its limit.")

    def _move_aside(self, folder: Path) -> Path | None:
        if not folder.exists():
            return None
        trash = self.skills_dir / ".staging" / f"old-{uuid.uuid4().hex}"
        folder.rename(trash)
        return trash

    def delete(self, name: str) -> None:
        """Remove an owned skill's folder and index entry; read-only skills refuse."""
        with self._locked(), transaction(self.sessions) as session:
            skill = session.get(Skill, name)
            if skill is None:
                raise SkillNotFound(f"No skill is named '{name}'.")
            if skill.read_only:
                raise SkillBuiltin(f"'{name}' is a read-only {skill.source} skill.")
            trash = self._move_aside(self.skills_dir / name)
            session.delete(skill)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)

    def duplicate(self, name: str, new_name: str, owner_id: int | None) -> Skill:
        """Copy a skill (a built-in, say) into an owned skill under a new name."""
        source = self.get(name)
        with self.staging() as stage:
            copy = stage / new_name
            shutil.copytree(self.folder(source), copy, symlinks=True)
            _rename_header(copy / "SKILL.md", source.name, new_name)
            return self.install(
                copy,
                Origin(source="copy", origin=f"copy of {name}", owner_id=owner_id),
                name=new_name,
            )

    def set_enabled(self, name: str, enabled: bool, expected_hash: str | None = None) -> Skill:
        """Switch a skill on or off; with a hash, only if the skill is still that content."""
        with transaction(self.sessions) as session:
            skill = session.get(Skill, name)
            if skill is None:
                raise SkillNotFound(f"No skill is named '{name}'.")
            if expected_hash is not None and expected_hash != skill.hash:
                raise SkillChanged(
                    f"'{name}' changed since you reviewed it: its hash is now {skill.hash}."
                )
            skill.enabled = enabled
            skill.updated_at = utcnow()
            if enabled and skill.author == "assistant":
                skill.locked = True
            return skill

    def sync_read_only(self, folders: Sequence[tuple[str, Path, SkillInfo]]) -> None:
        """Make the index hold exactly these (source, folder, info) read-only skills."""
        wanted = {info.name: (source, folder, info) for source, folder, info in folders}
        with self._locked(), transaction(self.sessions) as session:
            rows = session.scalars(select(Skill).where(Skill.source.in_(READ_ONLY_SOURCES)))
            for row in rows:
                if row.name not in wanted:
                    session.delete(row)
            for name, (source, folder, info) in wanted.items():
                _upsert_read_only(session, name, source, folder, info)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise writers across processes sharing this skills folder."""
        with open(self.skills_dir / ".lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=512)
def _header_info(folder: str, name: str, skill_hash: str) -> SkillInfo:
    header, body = read_skill_md((Path(folder) / "SKILL.md").read_bytes())
    return read_header(header, body, name)


@functools.lru_cache(maxsize=512)
def _scripts(folder: str, skill_hash: str) -> tuple[str, ...]:
    return tuple(scripts_of(Path(folder)))


def _fill(
    skill: Skill, info: SkillInfo, origin: Origin, skill_hash: str, files: int, size: int
) -> None:
    skill.source = origin.source
    skill.origin = origin.origin
    skill.owner_id = origin.owner_id
    skill.author = origin.author
    skill.description = info.description
    skill.execution = info.execution
    skill.tier = info.tier
    skill.hash = skill_hash
    skill.revision = (skill.revision or 0) + 1
    skill.file_count = files
    skill.size_bytes = size
    skill.warnings = list(info.warnings)
    skill.updated_at = utcnow()


def _exists_message(info: SkillInfo) -> str:
    if info.declared_name is None:
        return f"A skill named '{info.name}' is already installed; pass replace=true to replace it."
    return (
        f"SKILL.md names the skill '{info.declared_name}', which would be installed as "
        f"'{info.name}', and a skill named '{info.name}' is already installed; choose another "
        "name (name= in the API, --name in the CLI) or pass replace=true to replace it."
    )


def _upsert_read_only(
    session: Session, name: str, source: str, folder: Path, info: SkillInfo
) -> None:
    row = session.get(Skill, name)
    if row is not None and not row.read_only:
        raise SkillExists(f"'{name}' from {folder} has the name of an installed skill.")
    skill_hash = content_hash(folder)
    files = regular_files(folder)
    if row is not None and row.hash == skill_hash and row.location == str(folder.resolve()):
        return
    row = row or Skill(name=name, created_at=utcnow(), revision=0, enabled=True)
    author = "builtin" if source == "builtin" else "operator"
    _fill(
        row,
        info,
        Origin(source=source, origin=str(folder), author=author),
        skill_hash,
        len(files),
        sum((folder / rel).stat().st_size for rel in files),
    )
    row.location = str(folder.resolve())
    session.add(row)


def _rename_header(skill_md: Path, old: str, new: str) -> None:
    """Point the copied header's name at the new folder; the rest stays byte for byte."""
    text = skill_md.read_text(encoding="utf-8")
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.strip() == f"name: {old}" or line.strip() in (f'name: "{old}"', f"name: '{old}'"):
            lines[index] = f"name: {new}"
            break
    skill_md.write_text("\n".join(lines), encoding="utf-8")

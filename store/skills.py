"""The skill store: folders on disk and their index in the database, changed together."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import operator
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import BindParameter, ColumnElement, Select, bindparam, case, func, or_, select
from sqlalchemy.orm import Session

from store.auditevents import audit_rollback, audit_skill_changed
from store.db import SessionFactory, core_connection, detached, transaction
from store.dependencies import Declared, declared_in
from store.errors import (
    HashRequired,
    SkillBuiltin,
    SkillChanged,
    SkillExists,
    SkillInvalid,
    SkillNotFound,
    StoreFull,
)
from store.frontmatter import read_loose
from store.hashing import content_hash, regular_files
from store.indexcache import IndexCache
from store.leniency import read_header, read_skill_dir
from store.limits import MAX_SKILLS, VERSIONS_KEPT
from store.lint import lint
from store.models import Skill, SkillVersion, utcnow
from store.names import EXECUTIONS, is_valid_name
from store.paths import inside
from store.resources import read_resource
from store.schemas import scripts_of
from store.scriptinput import command_line_read
from store.signatures import (
    Verdict,
    check_switch_on,
    judge,
    owner_keys,
    settle,
    take_signature,
)
from store.validation import SkillInfo, name_problems
from store.versions import (
    TREES_DIR,
    VERSIONS_DIR,
    Blobs,
    Made,
    collect_trees,
    digests_of,
    keep_folder,
    record,
    trim,
)

BUILTIN_DIR = Path(__file__).parent / "builtin"
_Row = TypeVar("_Row", bound=Any)
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
    """Installs, lists, reads and removes skills; the only writer of the skills folder.

    Owned skills live in `<skills>/owner_<id>/<name>/` (the underscore keeps owner folders apart
    from skill names); shared read-only skills stay where they were found. Every lookup is made
    for one owner, who sees their own skills and the shared ones and nothing else.
    """

    def __init__(
        self,
        sessions: SessionFactory,
        skills_dir: Path,
        dependency_check: Callable[[Declared], list[str]] | None = None,
        versions_kept: int = VERSIONS_KEPT,
    ) -> None:
        self.sessions = sessions
        # Versions kept of each skill besides its current one and pinned ones (store/versions.py).
        self.versions_kept = versions_kept
        # Resolves declared dependencies at install (store/dependencies.py's check_resolvable);
        # it raises SkillInvalid, or returns warnings kept with the skill.
        self.dependency_check = dependency_check
        # Lookups and listings kept while the index is unchanged (see store/indexcache.py).
        self.index = IndexCache()
        self.skills_dir = skills_dir
        self.skills_dir.mkdir(parents=True, exist_ok=True)
        (self.skills_dir / ".staging").mkdir(exist_ok=True)
        self.blobs = Blobs(self.skills_dir / VERSIONS_DIR)
        self._adopt_legacy_folders()

    # -- reading -----------------------------------------------------------------

    def get(self, owner_id: int, name: str) -> Skill:
        """The skill `name` as `owner_id` sees it: their own, or a shared one (a detached row:
        its attributes are read, never saved back)."""
        return self.index.read(("get", owner_id, name), lambda: self._get(owner_id, name))

    def _get(self, owner_id: int, name: str) -> Skill:
        row = None
        if is_valid_name(name):
            with core_connection(self.sessions) as connection:
                row = connection.execute(_FIND_ROW, {"owner_id": owner_id, "name": name}).first()
        if row is None:
            raise SkillNotFound(f"No skill is named {_shown(name)}.")
        # Built from the table's row, without a Session: every call that names a skill reads
        # one, and the ORM's load costs twice the query.
        return detached(Skill, row._asdict())

    def installed(self, owner_id: int, *, enabled_only: bool = False) -> list[Skill]:
        query = _visible(owner_id)
        if enabled_only:
            query = query.where(Skill.enabled.is_(True))
        with self.sessions() as session:
            return _unshadowed(session.scalars(query))

    def listing(self, owner_id: int, *, enabled_only: bool = False) -> list[Any]:
        """What list_skills shows of each skill the owner sees: only those columns, by name.

        Columns, in this order: name, description, enabled, author, execution, tier, owner_id,
        source_chats, rationale (the last two for drafts only).
        """
        key = ("listing", owner_id, enabled_only)
        return list(self.index.read(key, lambda: self._listing(owner_id, enabled_only)))

    def _listing(self, owner_id: int, enabled_only: bool) -> list[Any]:
        query = _LISTING_ENABLED if enabled_only else _LISTING
        with core_connection(self.sessions) as connection:
            rows = connection.execute(query, {"owner_id": owner_id}).all()
        # Read by position: for 200 rows, attribute reads cost about as much as the query.
        return _unshadowed(rows, operator.itemgetter(0), operator.itemgetter(6))

    def catalog(self, owner_id: int) -> list[tuple[str, str]]:
        """Name and description of every enabled skill the owner sees, from the index alone."""
        query = select(Skill.name, Skill.description, Skill.owner_id).where(
            _visible_to(owner_id), Skill.enabled.is_(True)
        )
        with self.sessions() as session:
            rows = _unshadowed(session.execute(query))
        return [(name, description) for name, description, _owner in rows]

    def folder(self, skill: Skill) -> Path:
        if skill.location:
            return Path(skill.location)
        assert skill.owner_id is not None, "an owned skill has an owner"
        return self._owned_folder(skill.owner_id, skill.name)

    def _owned_folder(self, owner_id: int, name: str) -> Path:
        return _owned_folder(self.skills_dir, owner_id, name)

    def info(self, skill: Skill) -> SkillInfo:
        """The parsed header of a skill, cached per content hash, with where it runs as the
        index says (the owner's choice may differ from SKILL.md's)."""
        info = _header_info(str(self.folder(skill)), skill.name, skill.hash)
        if skill.execution and info.execution != skill.execution:
            return replace(info, execution=skill.execution)
        return info

    def scripts(self, skill: Skill) -> list[str]:
        return list(_scripts(str(self.folder(skill)), skill.hash))

    def files(self, skill: Skill) -> list[FileEntry]:
        return list(_files(str(self.folder(skill)), skill.hash))

    def script_inputs(self, skill: Skill) -> dict[str, str | None]:
        """Each script and what of it reads its command line (None: it reads none)."""
        return dict(_script_inputs(str(self.folder(skill)), skill.hash))

    def read_file(self, skill: Skill, path: object, limit: int) -> tuple[str, bytes]:
        return read_resource(self.folder(skill), path, limit)

    def had(self, skill: Skill, skill_hash: str) -> bool:
        """Whether `skill` has or once had the content hash `skill_hash`."""
        if skill.hash == skill_hash:
            return True
        with self.sessions() as session:
            return session.get(SkillVersion, (skill.id, skill_hash)) is not None

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
        enable: bool | None = True,
        replace: bool = False,
        expected_name: str | None = None,
        name: str | None = None,
        warnings: Sequence[str] = (),
        guard: Callable[[Skill | None], None] | None = None,
        annotate: Callable[[Skill, SkillInfo], None] | None = None,
        execution: str | None = None,
        made: Made | None = None,
        rollback_by: str | None = None,
    ) -> Skill:
        """Validate the staged folder `root` and move it into the owner's store by one rename.

        The header is read as an import reads it (store/leniency.py): `expected_name` is the
        folder the skill came from (default: `root`'s name), `name` the name the user chose.
        Its warnings, and `warnings` from the import itself, are kept with the skill; lint
        findings are kept apart as `lint_warnings`.

        `enable=None` keeps the replaced skill's switch (off for a new one). `guard` sees the
        skill being replaced (or None) under the store's lock and raises to refuse; `annotate`
        fills review notes in the same transaction as the index entry. `execution` is the
        owner's choice of where it runs; without one, a replaced skill keeps its owner's.
        `made` says what made this version and who, for its versions (default: `origin`'s);
        the version replaced is kept too (store/versions.py). The audit trail records the
        change, or with `rollback_by` (who asked) a rollback to a kept version.
        """
        owner_id = origin.owner_id
        if owner_id is None:
            raise ValueError("an installed skill needs an owner")
        folder_name = expected_name if expected_name is not None else root.name
        signature = take_signature(root)
        info = read_skill_dir(root, folder_name, name)
        skill_hash = content_hash(root)
        verdict = self._judge(owner_id, signature, skill_hash)
        files = regular_files(root)
        size = sum((root / rel).stat().st_size for rel in files)
        contents = {rel: (root / rel).read_bytes() for rel in files}
        findings = lint(contents, info)
        if self.dependency_check is not None:
            warnings = [*warnings, *self.dependency_check(declared_in(root))]
        final = self._owned_folder(owner_id, info.name)
        made = made or Made(origin.source, origin.author)
        with self._locked():
            with transaction(self.sessions) as session:
                existing = session.scalar(_FIND, {"owner_id": owner_id, "name": info.name})
                if guard is not None:
                    guard(existing)
                self._check_can_install(session, existing, owner_id, info, replace)
                # The version replaced is kept, even one recorded before versions were kept.
                pending = {} if existing is None else keep_folder(session, existing, final)
                final.parent.mkdir(exist_ok=True)
                trash = self._move_aside(final)
                root.rename(final)
                try:
                    before = existing.hash if existing is not None else None
                    skill = existing or Skill(name=info.name, created_at=utcnow(), revision=0)
                    keep = bool(existing is not None and existing.enabled)
                    if execution is not None:
                        skill.execution_choice = execution
                    _fill(skill, info, origin, skill_hash, len(files), size)
                    skill.warnings = [*warnings, *info.warnings]
                    switch = settle(session, skill, verdict, enable)
                    skill.enabled = keep if switch is None else switch
                    skill.lint_warnings = findings
                    if annotate is not None:
                        annotate(skill, info)
                    else:  # a fresh import: the notes of a draft it replaces no longer apply
                        skill.source_chats = None
                        skill.rationale = None
                    session.add(skill)
                    pending |= record(session, skill, made, contents)
                    freed = trim(session, skill, self.versions_kept)
                    session.flush()  # the audit's append is the transaction's last statement
                    _audit_install(
                        session, owner_id, info.name, before, skill_hash, made, rollback_by
                    )
                except BaseException:
                    final.rename(root)
                    if trash is not None:
                        trash.rename(final)
                    with contextlib.suppress(OSError):
                        final.parent.rmdir()  # only when this was the owner's first skill
                    raise
            # Committed: the versions' files are stored before another writer may look.
            self.blobs.put_all(pending)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        self._collect(freed)
        return skill

    def _collect(self, digests: set[str]) -> None:
        """Remove the stored files of versions just dropped, if no other version lists them."""
        if digests:
            with self._locked(), self.sessions() as session:
                self.blobs.collect(session, digests)
                collect_trees(session, self.blobs.root / TREES_DIR)

    def _judge(self, owner_id: int, signature: bytes | None, skill_hash: str) -> Verdict:
        """The verdict on a staged skill's signature for its owner (store/signatures.py)."""
        if signature is None:
            return Verdict()
        with self.sessions() as session:
            keys = owner_keys(session, owner_id)
            session.expunge_all()
        return judge(signature, skill_hash, keys)

    def _check_can_install(
        self,
        session: Session,
        existing: Skill | None,
        owner_id: int,
        info: SkillInfo,
        replace: bool,
    ) -> None:
        name = info.name
        if existing is not None:
            if existing.read_only:
                raise SkillBuiltin(f"'{name}' is a read-only {existing.source} skill.")
            if not replace:
                raise SkillExists(_exists_message(info))
            return
        owned = select(func.count()).select_from(Skill).where(Skill.owner_id == owner_id)
        if (session.scalar(owned) or 0) >= MAX_SKILLS:
            raise StoreFull(f"You already have {MAX_SKILLS} skills, the store's limit.")

    def _move_aside(self, folder: Path) -> Path | None:
        if not folder.exists():
            return None
        trash = self.skills_dir / ".staging" / f"old-{uuid.uuid4().hex}"
        folder.rename(trash)
        return trash

    def delete(self, owner_id: int, name: str) -> None:
        """Remove an owned skill's folder and index entry; read-only skills refuse."""
        with self._locked(), transaction(self.sessions) as session:
            skill = _find(session, owner_id, name)
            if skill.read_only:
                raise SkillBuiltin(f"'{name}' is a read-only {skill.source} skill.")
            trash = self._move_aside(self.folder(skill))
            freed = digests_of(session, skill.id)
            session.delete(skill)
            session.flush()
            audit_skill_changed(session, owner_id, "owner", name, "deleted", skill.hash, None)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
        self._collect(freed)

    def duplicate(self, owner_id: int, name: str, new_name: str) -> Skill:
        """Copy a skill the owner sees (a built-in, say) into an owned skill under a new name."""
        if not is_valid_name(new_name):
            raise SkillInvalid(
                f"The new name {_shown(new_name)} is not a valid skill name.",
                errors=name_problems(new_name),
            )
        source = self.get(owner_id, name)
        with self.sessions() as session:
            taken = session.scalar(_FIND, {"owner_id": owner_id, "name": new_name})
        if taken is not None:
            raise SkillExists(f"A skill named '{new_name}' is already installed.")
        with self.staging() as stage:
            copy = inside(stage, new_name)
            shutil.copytree(self.folder(source), copy, symlinks=True)
            _rename_header(copy / "SKILL.md", source.name, new_name)
            return self.install(
                copy,
                Origin(source="copy", origin=f"copy of {name}", owner_id=owner_id),
                name=new_name,
            )

    def set_enabled(
        self,
        owner_id: int,
        name: str,
        enabled: bool,
        expected_hash: str | None = None,
        override_signature: bool = False,
    ) -> Skill:
        """Switch an owned skill on or off; with a hash, only if it is still that content. A
        skill held for want of a trusted signature is switched on only with
        `override_signature` (store/signatures.py)."""
        with transaction(self.sessions) as session:
            skill = _find(session, owner_id, name)
            if skill.read_only:
                raise SkillBuiltin(f"'{name}' is a read-only {skill.source} skill.")
            if enabled and expected_hash is None and skill.author == "assistant":
                raise HashRequired(
                    f"'{name}' was written by the assistant: send the hash you reviewed "
                    "(GET /api/skills/<name> shows it) to enable it."
                )
            if expected_hash is not None and expected_hash != skill.hash:
                raise SkillChanged(
                    f"'{name}' changed since you reviewed it: its hash is now {skill.hash}."
                )
            change = None if skill.enabled == enabled else ("enabled" if enabled else "disabled")
            if enabled and not skill.enabled:
                check_switch_on(session, skill, override_signature)
            skill.enabled = enabled
            skill.updated_at = utcnow()
            if enabled and skill.author == "assistant":
                skill.locked = True
            if change is not None:
                session.flush()
                audit_skill_changed(
                    session, owner_id, "owner", name, change, skill.hash, skill.hash
                )
            return skill

    def set_execution(self, owner_id: int, name: str, execution: str | None) -> Skill:
        """Choose where an owned skill's scripts run (node, spark, sandbox), or with None go
        back to what SKILL.md says (else `auto`); its content and hash stay as they are."""
        if execution is not None and execution not in EXECUTIONS:
            raise SkillInvalid(
                f"Where a skill runs is one of {', '.join(EXECUTIONS)}, not {_shown(execution)}."
            )
        with transaction(self.sessions) as session:
            skill = _find(session, owner_id, name)
            if skill.read_only:
                raise SkillBuiltin(f"'{name}' is a read-only {skill.source} skill.")
            declared = _header_info(str(self.folder(skill)), skill.name, skill.hash).execution
            skill.execution_choice = execution
            skill.execution = execution or declared
            skill.updated_at = utcnow()
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
                _upsert_read_only(session, name, source, folder, info, self.versions_kept)

    def _adopt_legacy_folders(self) -> None:
        """Move folders of owned skills from `<skills>/<name>` into their owner's folder."""
        with self.sessions() as session:
            owned = list(
                session.execute(select(Skill.owner_id, Skill.name).where(Skill.location.is_(None)))
            )
        for owner_id, name in owned:
            legacy = self.skills_dir / name
            if owner_id is None or not (legacy / "SKILL.md").is_file():
                continue
            final = self._owned_folder(owner_id, name)
            if not final.exists():
                final.parent.mkdir(exist_ok=True)
                legacy.rename(final)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise writers across processes sharing this skills folder."""
        with open(self.skills_dir / ".lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _visible_to(owner_id: int | BindParameter[int], skills: Any = Skill) -> ColumnElement[bool]:
    """The rule on the mapped class, or on the table's columns (`Skill.__table__.c`).

    The shared sources are compared one by one: an IN list is expanded at every execution.
    """
    shared = [skills.source == source for source in READ_ONLY_SOURCES]
    condition: ColumnElement[bool] = or_(skills.owner_id == owner_id, *shared)
    return condition


def _visible(owner_id: int) -> Select[Skill]:
    """Skills the owner sees, their own first: an owned skill shadows a shared one's name."""
    return select(Skill).where(_visible_to(owner_id)).order_by(Skill.owner_id.is_(None))


def _unshadowed(
    rows: Iterable[_Row],
    name_of: Callable[[Any], str] = operator.attrgetter("name"),
    owner_of: Callable[[Any], int | None] = operator.attrgetter("owner_id"),
) -> list[_Row]:
    """One row per name, by name; an owned row wins over a shared one of the same name."""
    chosen: dict[str, _Row] = {}
    for row in rows:
        name = name_of(row)
        if name not in chosen or owner_of(chosen[name]) is None:
            chosen[name] = row
    return [chosen[name] for name in sorted(chosen)]


# Statements built once, for the reads every call makes: bound to the owner when they run.
_VISIBLE = _visible_to(bindparam("owner_id"))
# The listing is built on the table, not the mapped class: its rows then skip the ORM's row
# processing (a tenth of a 200-skill listing's time).
_TABLE = Skill.__table__.c
_DRAFTED = _TABLE.author == "assistant"  # only a draft shows its chats and reasons
_LISTING = select(
    _TABLE.name, _TABLE.description, _TABLE.enabled, _TABLE.author, _TABLE.execution,
    _TABLE.tier, _TABLE.owner_id,
    case((_DRAFTED, _TABLE.source_chats)).label("source_chats"),
    case((_DRAFTED, _TABLE.rationale)).label("rationale"),
).where(_visible_to(bindparam("owner_id"), _TABLE))  # fmt: skip
_LISTING_ENABLED = _LISTING.where(_TABLE.enabled.is_(True))

# The lookup behind every call that names a skill, built once on the table and read without a
# Session (`get`); `_FIND` is the same on the mapped class, for writers inside a transaction.
_FIND_ROW = (
    select(*_TABLE)
    .where(_visible_to(bindparam("owner_id"), _TABLE), _TABLE.name == bindparam("name"))
    .order_by(_TABLE.owner_id.is_(None))
    .limit(1)
)
_FIND = (
    select(Skill)
    .where(_VISIBLE, Skill.name == bindparam("name"))
    .order_by(Skill.owner_id.is_(None))
    .limit(1)
)


def current_hashes(session: Session, owner_id: int, skills: Iterable[str]) -> dict[str, str]:
    """The content hash of each of `skills` the owner sees (their own before a shared one)."""
    names = set(skills)
    if not names:
        return {}
    rows = session.execute(
        select(Skill.name, Skill.owner_id, Skill.hash).where(
            Skill.name.in_(names), _visible_to(owner_id)
        )
    ).all()
    found: dict[str, str] = {}
    for name, _owner, skill_hash in sorted(rows, key=lambda row: row[1] is not None):
        found[name] = skill_hash  # the owner's own row sorts last, so it wins
    return found


def _find(session: Session, owner_id: int, name: str) -> Skill:
    """The skill `name` as the owner sees it; a malformed name is simply not found."""
    skill = None
    if is_valid_name(name):
        skill = session.scalar(_FIND, {"owner_id": owner_id, "name": name})
    if skill is None:
        raise SkillNotFound(f"No skill is named {_shown(name)}.")
    return skill


def _shown(name: object) -> str:
    """A name as an error message may quote it: short and printable."""
    text = repr(name) if not isinstance(name, str) else f"'{name}'"
    return text if len(text) <= 80 else text[:77] + "...'"


@functools.lru_cache(maxsize=512)
def _header_info(folder: str, name: str, skill_hash: str) -> SkillInfo:
    loose = read_loose((Path(folder) / "SKILL.md").read_bytes())
    return read_header(loose.header, loose.body, name)


@functools.lru_cache(maxsize=512)
def _scripts(folder: str, skill_hash: str) -> tuple[str, ...]:
    return tuple(scripts_of(Path(folder)))


@functools.lru_cache(maxsize=512)
def _script_inputs(folder: str, skill_hash: str) -> tuple[tuple[str, str | None], ...]:
    root = Path(folder)
    return tuple(
        (path, command_line_read(path, (root / path).read_text("utf-8", "replace")))
        for path in _scripts(folder, skill_hash)
    )


@functools.lru_cache(maxsize=512)
def _files(folder: str, skill_hash: str) -> tuple[FileEntry, ...]:
    """A skill's files and sizes: fixed by its content hash, like its header and scripts."""
    root = Path(folder)
    return tuple(FileEntry(rel, (root / rel).stat().st_size) for rel in regular_files(root))


@functools.lru_cache(maxsize=4096)
def _owned_folder(skills_dir: Path, owner_id: int, name: str) -> Path:
    """An owned skill's folder, checked once per process: only the store writes below its
    directory, and every call that names a skill needs the folder (two path resolutions)."""
    return inside(skills_dir, f"owner_{owner_id}", name)


def _fill(
    skill: Skill, info: SkillInfo, origin: Origin, skill_hash: str, files: int, size: int
) -> None:
    skill.source = origin.source
    skill.origin = origin.origin
    skill.owner_id = origin.owner_id
    skill.author = origin.author
    skill.description = info.description
    skill.execution = skill.execution_choice or info.execution
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
    session: Session, name: str, source: str, folder: Path, info: SkillInfo, keep: int
) -> None:
    # An owner's skill of the same name shadows this one for that owner only.
    row = session.scalar(select(Skill).where(Skill.name == name, Skill.owner_id.is_(None)))
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
    # Its versions are remembered (a job's grant may name one) but not kept: its files are the
    # operator's, read-only here.
    record(session, row, Made(source, author))
    trim(session, row, keep)


def _rename_header(skill_md: Path, old: str, new: str) -> None:
    """Point the copied header's name at the new folder; the rest stays byte for byte."""
    text = skill_md.read_text(encoding="utf-8")
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.strip() == f"name: {old}" or line.strip() in (f'name: "{old}"', f"name: '{old}'"):
            lines[index] = f"name: {new}"
            break
    skill_md.write_text("\n".join(lines), encoding="utf-8")


def _audit_install(
    session: Session, owner_id: int, name: str, before: str | None, after: str, made: Made,
    rollback_by: str | None,
) -> None:  # fmt: skip
    """The audit trail's record of an install: a rollback, or a skill made or replaced."""
    if rollback_by is not None and before is not None:
        audit_rollback(session, owner_id, rollback_by, name, before, after)
        return
    change = "created" if before is None else "replaced"
    audit_skill_changed(session, owner_id, made.author, name, change, before, after, made.source)

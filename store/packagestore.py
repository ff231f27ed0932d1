"""Server-side packages: one `<name>@<hash>.tar.gz` per hash, and each node's manifest."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import ColumnElement, and_, or_, select, true

from store.db import SessionFactory
from store.errors import PackageNotFound, StoreError
from store.hashing import hash_entries
from store.lifecycle.runs import ACTIVE_STATES
from store.models import NodeOwner, Run, Skill, SkillVersion
from store.names import AUTO, is_valid_hash, is_valid_name
from store.packages import build_package
from store.paths import inside
from store.pinned import pinned_view
from store.skills import SkillStore

log = structlog.get_logger(__name__)

# Node names with a runner of their own; every other node runs `node` skills.
SPECIAL_NODES = ("spark", "sandbox")
_SUFFIX = ".tar.gz"


@dataclass(frozen=True)
class PackageInfo:
    name: str
    hash: str
    sha256: str
    size: int
    path: Path

    def entry(self) -> dict[str, Any]:
        """The package as a manifest entry."""
        return {"name": self.name, "hash": self.hash, "sha256": self.sha256, "size": self.size}


def execution_for(node: str) -> str:
    """The execution mode whose skills a node runs: `spark`, `sandbox` or `node`."""
    return node if node in SPECIAL_NODES else "node"


def listed_executions(node: str) -> tuple[str, ...]:
    """The executions of the skills a node's manifest lists: its own, and `auto` (a skill that
    runs on the Spark or a node, decided at each call) on the Spark and on nodes."""
    execution = execution_for(node)
    return (execution, AUTO) if execution in ("node", "spark") else (execution,)


def valid_key(name: str, skill_hash: str) -> bool:
    """Whether `name@hash` is well formed (and so safe to use in a file name)."""
    return is_valid_name(name) and is_valid_hash(skill_hash)


# Package paths a store remembers, each checked once (a name and hash always give the same one).
KNOWN_PATHS = 4096


class PackageStore:
    """Builds packages once per hash and serves them while the hash is current or in use."""

    def __init__(self, packages_dir: Path, store: SkillStore) -> None:
        self.packages_dir = packages_dir
        self.store = store
        self.packages_dir.mkdir(parents=True, exist_ok=True)
        self._digests: dict[Path, tuple[str, int]] = {}
        self._paths: dict[tuple[str, str], Path] = {}  # checked once: two realpath calls each
        self._lock = threading.Lock()

    def path(self, name: str, skill_hash: str) -> Path:
        known = self._paths.get((name, skill_hash))
        if known is not None:
            return known
        if not valid_key(name, skill_hash):
            raise PackageNotFound(f"No package {name!r}@{skill_hash!r} is served.")
        path = inside(self.packages_dir, f"{name}@{skill_hash}{_SUFFIX}")
        with self._lock:
            if len(self._paths) >= KNOWN_PATHS:
                self._paths.clear()
            self._paths[(name, skill_hash)] = path
        return path

    def ensure_built(self, skill: Skill) -> PackageInfo:
        """The package of the skill's current hash, built from its folder if not built yet."""
        path = self.path(skill.name, skill.hash)
        if not path.is_file():
            self._build(skill, path)
        return self._info(skill.name, skill.hash, path)

    def _build(self, skill: Skill, path: Path) -> None:
        try:
            data = build_package(self.store.folder(skill))
        except (FileNotFoundError, NotADirectoryError) as e:  # its folder moved away mid-read
            raise PackageNotFound(
                f"No package {skill.name}@{skill.hash} is served: the skill was deleted or "
                "replaced while its package was being built."
            ) from e
        # Hash what was packed, not the folder: an edit racing the build can't slip through.
        if package_hash(data) != skill.hash:
            raise PackageNotFound(
                f"The files of '{skill.name}' no longer have hash {skill.hash}: the skill "
                "changed, or was deleted, while its package was being built."
            )
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            temp.write_bytes(data)
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
        log.info("package built", skill=skill.name, hash=skill.hash, size=len(data))

    def _info(self, name: str, skill_hash: str, path: Path) -> PackageInfo:
        with self._lock:
            known = self._digests.get(path)
        if known is None:
            try:
                data = path.read_bytes()
            except FileNotFoundError as e:
                raise PackageNotFound(f"No package {name}@{skill_hash} is served.") from e
            known = (hashlib.sha256(data).hexdigest(), len(data))
            with self._lock:
                self._digests[path] = known
        return PackageInfo(name, skill_hash, known[0], known[1], path)

    def find(
        self, name: str, skill_hash: str, sessions: SessionFactory, node: str | None = None
    ) -> PackageInfo:
        """The package `name@hash` while it is current or a queued/running run uses it.

        With `node`, only a package that node's manifest could list.
        """
        missing = PackageNotFound(f"No package {name}@{skill_hash} is served.")
        if not valid_key(name, skill_hash):
            raise missing
        used = select(Run.id).where(
            Run.skill_name == name, Run.skill_hash == skill_hash, _active_on(node)
        )
        # Packages are keyed by content: any owner's skill with this name and hash is this one,
        # but a node holds only its owners' (and the shared skills).
        current = select(Skill).where(Skill.name == name, Skill.hash == skill_hash)
        if node is not None:
            current = current.where(_offered_on(node))
            used = used.where(_run_offered_on(node))
        with sessions() as session:
            skills = list(session.scalars(current))
            listed = any(_listed_for(skill, node) for skill in skills)
            in_use = listed or session.scalar(used.limit(1)) is not None
        if not in_use:
            raise missing
        if skills:
            return self.ensure_built(skills[0])
        return self._version_built(name, skill_hash, sessions)

    def _version_built(self, name: str, skill_hash: str, sessions: SessionFactory) -> PackageInfo:
        """The package of a hash no skill is at now, which a run uses: a version it pins
        (store/pinned.py), built from the version's kept files the first time."""
        path = self.path(name, skill_hash)
        if not path.is_file():
            kept = (
                select(Skill)
                .join(SkillVersion, SkillVersion.skill_id == Skill.id)
                .where(Skill.name == name, SkillVersion.hash == skill_hash, SkillVersion.kept)
            )
            with sessions() as session:
                skill = session.scalars(kept.limit(1)).first()
                if skill is not None:
                    session.expunge(skill)
            if skill is None:  # no version keeps its files: only a package already built
                raise PackageNotFound(f"No package {name}@{skill_hash} is served.")
            try:
                self._build(pinned_view(self.store, skill, skill_hash), path)
            except StoreError as e:  # its kept files are gone
                raise PackageNotFound(
                    f"No package {name}@{skill_hash} is served: {e.message}"
                ) from e
        return self._info(name, skill_hash, path)

    def manifest_for(self, node: str, sessions: SessionFactory) -> dict[str, Any]:
        """What `node` should hold: its enabled skills plus hashes its unfinished runs use."""
        query = select(Skill).where(
            Skill.enabled.is_(True),
            Skill.execution.in_(listed_executions(node)),
            _offered_on(node),
        )
        in_flight = (
            select(Run.skill_name, Run.skill_hash)
            .where(_active_on(node), _run_offered_on(node))
            .distinct()
        )
        with sessions() as session:
            skills = list(session.scalars(query.order_by(Skill.name)))
            used = [
                (name, skill_hash)
                for name, skill_hash in session.execute(in_flight)
                if name is not None and skill_hash is not None  # a command's run holds none
            ]
        entries: dict[tuple[str, str], dict[str, Any]] = {}
        for skill in skills:
            try:
                entries[(skill.name, skill.hash)] = self.ensure_built(skill).entry()
            except PackageNotFound as e:
                log.warning("package left out of manifest", skill=skill.name, reason=e.message)
        for name, skill_hash in used:
            if (name, skill_hash) in entries:
                continue
            try:
                entries[(name, skill_hash)] = self._version_built(
                    name, skill_hash, sessions
                ).entry()
            except PackageNotFound as e:
                log.warning("package left out of manifest", skill=name, reason=e.message)
        packages = [entries[key] for key in sorted(entries)]
        return {"node": node, "issued_at": int(time.time()), "packages": packages}

    def prune(self, sessions: SessionFactory) -> list[str]:
        """Remove packages whose hash is neither current nor used by an unfinished run."""
        with sessions() as session:
            keep = {(s.name, s.hash) for s in session.scalars(select(Skill))}
            active = select(Run.skill_name, Run.skill_hash).where(Run.status.in_(ACTIVE_STATES))
            keep |= {
                (name, skill_hash)
                for name, skill_hash in session.execute(active)
                if name is not None and skill_hash is not None  # a command's run holds none
            }
        removed = []
        for path in self.packages_dir.glob(f"*@*{_SUFFIX}"):
            name, _, skill_hash = path.name.removesuffix(_SUFFIX).partition("@")
            if (name, skill_hash) not in keep:
                path.unlink(missing_ok=True)
                with self._lock:
                    self._digests.pop(path, None)
                removed.append(f"{name}@{skill_hash}")
        return sorted(removed)


def package_hash(data: bytes) -> str:
    """The content hash of the files inside a package this store built."""
    entries = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            source = tar.extractfile(member) if member.isreg() else None
            if source is not None:
                entries.append((member.name, source.read()))
    return hash_entries(entries)


def _listed_for(skill: Skill, node: str | None) -> bool:
    return node is None or (skill.enabled and skill.execution in listed_executions(node))


def _offered_on(node: str) -> ColumnElement[bool]:
    """Skills a node may hold: its owners' and the shared ones; every owner's on a runner."""
    if node in SPECIAL_NODES:
        return true()
    owners = select(NodeOwner.owner_id).where(NodeOwner.node_name == node)
    return or_(Skill.owner_id.is_(None), Skill.owner_id.in_(owners))


def _run_offered_on(node: str) -> ColumnElement[bool]:
    if node in SPECIAL_NODES:
        return true()
    return Run.owner_id.in_(select(NodeOwner.owner_id).where(NodeOwner.node_name == node))


def _active_on(node: str | None) -> ColumnElement[bool]:
    """Unfinished runs, on `node`'s runner when a node is named."""
    active = Run.status.in_(ACTIVE_STATES)
    if node is None:
        return active
    execution = execution_for(node)
    if execution == "node":
        return and_(active, Run.execution == execution, Run.node == node)
    return and_(active, Run.execution == execution)

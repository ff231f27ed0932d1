"""Builders of skill folders and zips for tests."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import yaml


def skill_md(name: str, description: str | None = None, **extra: object) -> str:
    header: dict[str, object] = {"name": name, "description": description or f"Does {name}."}
    header.update(extra)
    return f"---\n{yaml.safe_dump(header, sort_keys=False)}---\n\n# {name}\n\nFollow these steps.\n"


def skill_files(name: str, **extra: object) -> dict[str, bytes]:
    return {
        "SKILL.md": skill_md(name, **extra).encode(),
        "scripts/hello.py": b"import json, os\nprint('hello', os.environ.get('SKILLFLEET_ARGS'))\n",
        "references/guide.md": b"# Guide\n\nRead me.\n",
    }


def write_skill(parent: Path, name: str, files: dict[str, bytes] | None = None) -> Path:
    root = parent / name
    for rel, data in (files or skill_files(name)).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def zip_bytes(files: dict[str, bytes], top: str | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel, data in files.items():
            archive.writestr(f"{top}/{rel}" if top else rel, data)
    return buffer.getvalue()


def skill_zip(name: str, top: str | None = "same", **extra: object) -> bytes:
    return zip_bytes(skill_files(name, **extra), top=name if top == "same" else top)


def store_snapshot(
    skills_dir: Path, sessions: object
) -> tuple[list[str], list[tuple[object, ...]]]:
    """Every path under the skills folder (staging included) and every index row."""
    from sqlalchemy import select

    from store.models import Skill

    paths = sorted(
        p.relative_to(skills_dir).as_posix() for p in skills_dir.rglob("*") if p.name != ".lock"
    )
    with sessions() as session:  # type: ignore[operator]
        rows = [
            (s.name, s.hash, s.enabled, s.revision, s.source)
            for s in session.scalars(select(Skill).order_by(Skill.name))
        ]
    return paths, rows


def owner_id_of(services: object, name: str = "alice") -> int:
    """The id of the owner `name`, created if needed (the `token` fixture's owner is alice)."""
    from store.db import transaction
    from store.tokens import ensure_owner

    with transaction(services.sessions) as session:  # type: ignore[attr-defined]
        return ensure_owner(session, name).id


def owned(services: object, name: str = "alice", source: str = "upload") -> object:
    """The Origin of a skill that owner `name` installs."""
    from store.skills import Origin

    return Origin(source=source, owner_id=owner_id_of(services, name))


def skill_folder(services: object, skill_name: str, owner: str = "alice") -> Path:
    """Where the store keeps an owned skill's files."""
    store = services.store  # type: ignore[attr-defined]
    return store.folder(store.get(owner_id_of(services, owner), skill_name))  # type: ignore[no-any-return]


def finished_run(owner_id: int, skill_hash: str, run_id: str, status: str = "succeeded") -> Any:
    """A run row of the `wiper` skill on node web01: succeeded with its output, or as `status`."""
    from store.models import Run

    return Run(
        id=run_id,
        owner_id=owner_id,
        skill_name="wiper",
        skill_hash=skill_hash,
        script="scripts/wipe.sh",
        arguments={},
        execution="node",
        queue="node.web01",
        node="web01",
        status=status,
        exit_code=0 if status == "succeeded" else None,
        stdout="wiping\n" if status == "succeeded" else "",
        timeout_seconds=300,
    )

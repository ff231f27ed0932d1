"""Importing a skill from a zip upload or a GitHub folder: stage, validate, then install."""

from __future__ import annotations

from pathlib import Path
from typing import IO

from store.archive import extract_zip, read_bounded
from store.github import fetch_github_folder, parse_github_url
from store.models import Skill
from store.skillmd import parse_skill_md
from store.skills import Origin, SkillStore


def import_zip(
    store: SkillStore,
    stream: IO[bytes],
    *,
    owner_id: int,
    enable: bool = True,
    replace: bool = False,
    filename: str | None = None,
) -> Skill:
    """Install the skill in a zip read from `stream`; nothing is written if anything fails."""
    data = read_bounded(stream)
    with store.staging() as stage:
        unpacked = stage / "unpacked"
        unpacked.mkdir()
        root = extract_zip(data, unpacked)
        expected = _header_name(root) if root == unpacked else None
        origin = Origin(source="upload", origin=filename, owner_id=owner_id)
        return store.install(root, origin, enable=enable, replace=replace, expected_name=expected)


def import_github(
    store: SkillStore,
    url: str,
    *,
    owner_id: int,
    api_base: str,
    token: str | None = None,
    enable: bool = True,
    replace: bool = False,
) -> Skill:
    """Install the skill in a GitHub folder, fetched through the GitHub API at `api_base`."""
    folder = parse_github_url(url)
    with store.staging() as stage:
        root = fetch_github_folder(folder, stage, api_base=api_base, token=token)
        origin = Origin(source="github", origin=url, owner_id=owner_id)
        return store.install(root, origin, enable=enable, replace=replace)


def _header_name(root: Path) -> str | None:
    """The name a root-level zip's SKILL.md claims; validation checks it in full later."""
    skill_md = root / "SKILL.md"
    if not skill_md.is_file():
        return None
    try:
        header, _body = parse_skill_md(skill_md.read_text(encoding="utf-8"))
    except Exception:  # noqa: BLE001 - validation reports the problem with its sentence
        return None
    name = header.get("name")
    return name if isinstance(name, str) else None

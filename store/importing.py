"""Importing skills from a zip upload or a GitHub folder: stage, validate, then install.

A zip or folder holding one skill (at its root, or in the zip's one top folder) installs it or
refuses it as a whole. One holding skill folders further down (a repository, say) is a bundle:
each skill folder is installed or refused on its own, and the report says which and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from store.archive import extract_zip, read_bounded
from store.bundles import StagedSkill, stage_zip_bundle, zip_bundle_folders
from store.errors import NameNotApplicable, SkillInvalid, StoreError
from store.github import (
    fetch_github_folder,
    fetch_github_skills,
    is_skill_folder,
    parse_github_url,
)
from store.leniency import NAME_HINT
from store.models import Skill
from store.skillmd import parse_skill_md
from store.skills import Origin, SkillStore


@dataclass(frozen=True)
class Refusal:
    """A skill folder of a bundle that was not installed, and why."""

    folder: str
    code: str
    message: str
    errors: list[str] = field(default_factory=list)


@dataclass
class BundleReport:
    """What a bundle import did with each skill folder it found."""

    imported: list[tuple[str, Skill]] = field(default_factory=list)  # (folder, skill)
    refused: list[Refusal] = field(default_factory=list)


def import_zip(
    store: SkillStore,
    stream: IO[bytes],
    *,
    owner_id: int,
    enable: bool = True,
    replace: bool = False,
    filename: str | None = None,
    name: str | None = None,
    execution: str | None = None,
) -> Skill | BundleReport:
    """Install the skill (or each skill of a bundle) in a zip read from `stream`.

    Nothing is written for a skill that is refused; `name` is the name to install a single
    skill under instead of its header's; `execution`, where the owner has each run.
    """
    data = read_bounded(stream)
    folders = zip_bundle_folders(data)
    with store.staging() as stage:
        if folders is not None:
            _refuse_name_for_bundle(name)
            staged = stage_zip_bundle(data, stage, folders)
            origin = filename or "upload"
            return _install_each(
                store,
                staged,
                lambda folder: Origin("upload", f"{origin}:{folder}", owner_id),
                enable=enable,
                replace=replace,
                execution=execution,
            )
        unpacked = stage / "unpacked"
        unpacked.mkdir()
        root = extract_zip(data, unpacked)
        expected = _root_zip_name(root, name) if root == unpacked else None
        origin_ = Origin(source="upload", origin=filename, owner_id=owner_id)
        return store.install(
            root, origin_, enable=enable, replace=replace, expected_name=expected, name=name,
            execution=execution,
        )  # fmt: skip


def import_github(
    store: SkillStore,
    url: str,
    *,
    owner_id: int,
    api_base: str,
    token: str | None = None,
    enable: bool = True,
    replace: bool = False,
    name: str | None = None,
    execution: str | None = None,
) -> Skill | BundleReport:
    """Install the skill in a GitHub folder, or each skill folder inside it, through the GitHub
    API at `api_base`."""
    folder = parse_github_url(url)
    with store.staging() as stage:
        if is_skill_folder(folder, api_base=api_base, token=token):
            root = fetch_github_folder(folder, stage, api_base=api_base, token=token)
            origin = Origin(source="github", origin=url, owner_id=owner_id)
            return store.install(
                root, origin, enable=enable, replace=replace, name=name, execution=execution
            )
        _refuse_name_for_bundle(name)
        staged = fetch_github_skills(folder, stage, api_base=api_base, token=token)
        base = url.strip().removesuffix("/")
        return _install_each(
            store,
            staged,
            lambda inner: Origin("github", f"{base}/{inner}", owner_id),
            enable=enable,
            replace=replace,
            execution=execution,
        )


def _install_each(
    store: SkillStore,
    staged: Sequence[StagedSkill],
    origin_of: Callable[[str], Origin],
    *,
    enable: bool,
    replace: bool,
    execution: str | None,
) -> BundleReport:
    if not staged:
        problem = "No SKILL.md was found in the folder or in any folder inside it."
        raise SkillInvalid(problem, errors=[problem])
    report = BundleReport()
    for item in staged:
        error = item.error
        if item.root is not None:
            try:
                skill = store.install(
                    item.root,
                    origin_of(item.folder),
                    enable=enable,
                    replace=replace,
                    execution=execution,
                )
            except StoreError as e:
                error = e
            else:
                report.imported.append((item.folder, skill))
                continue
        assert error is not None  # a staged skill has a root or an error
        report.refused.append(
            Refusal(item.folder, error.code, error.message, list(error.errors or []))
        )
    return report


def _refuse_name_for_bundle(name: str | None) -> None:
    if name is not None:
        raise NameNotApplicable(
            "A name can only be given to a single skill; this import holds skill folders "
            "further down, and each is installed under its own name."
        )


def _root_zip_name(root: Path, chosen: str | None) -> str | None:
    """The folder name to read a root-level zip's skill with: its header's own name.

    Such a zip has no folder to compare the name with or take one from, so a header without
    a name needs a name given at import.
    """
    try:
        header, _body = parse_skill_md((root / "SKILL.md").read_text(encoding="utf-8"))
    except (SkillInvalid, UnicodeDecodeError, OSError):
        return None  # validation reports the problem with its sentence
    declared = header.get("name")
    if isinstance(declared, str | int) and not isinstance(declared, bool):
        return str(declared)
    if chosen is None:
        problem = (
            "The header has no name and the zip has no top folder to take one from; "
            + NAME_HINT
            + "."
        )
        raise SkillInvalid("The skill has 1 problem.", errors=[problem])
    return None

"""Read-only skills found on disk: the built-ins and the operator's configured paths.

The built-ins are checked strictly. A configured path holds skills people already have (a
team's folder, an agent's skills folder), so it is read as an import reads a skill: lenient
with warnings on the header, strict on what keeps the system safe (sizes, links, scripts that
parse, a name safe as a folder and a grant key).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from store.errors import ConfigError, SkillInvalid, SkillTooLarge
from store.frontmatter import read_loose
from store.leniency import read_skill_dir, relax_header
from store.validation import SkillInfo, validate_skill_dir

SKIPPED_DIRS = {".git", "node_modules", "__pycache__"}


def skill_folders(path: Path) -> list[Path]:
    """`path` itself when it holds SKILL.md, else its sub-folders that do."""
    if not path.exists():
        raise ConfigError(f"Skill path {path} does not exist.")
    if not path.is_dir():
        raise ConfigError(f"Skill path {path} is not a folder.")
    if (path / "SKILL.md").is_file():
        return [path]
    found = sorted(
        child
        for child in path.iterdir()
        if child.is_dir() and child.name not in SKIPPED_DIRS and (child / "SKILL.md").is_file()
    )
    if not found:
        raise ConfigError(f"Skill path {path} holds no SKILL.md and no skill folders.")
    return found


def discover(paths: Sequence[Path]) -> list[Path]:
    """Every skill folder under the configured paths; duplicate names stop start-up."""
    seen: dict[str, Path] = {}
    for path in paths:
        for folder in skill_folders(path):
            name = _name_of(folder)
            if name in seen:
                raise ConfigError(
                    f"Skill path {folder} holds a skill named '{name}', "
                    f"which {seen[name]} already provides."
                )
            seen[name] = folder
    return list(seen.values())


def builtin_folders(root: Path) -> list[Path]:
    return sorted(child for child in root.iterdir() if (child / "SKILL.md").is_file())


def _name_of(folder: Path) -> str:
    """The name the skill is served under, as an import of the folder would name it."""
    try:
        loose = read_loose((folder / "SKILL.md").read_bytes())
    except (SkillInvalid, SkillTooLarge) as e:
        raise ConfigError(f"Skill path {folder} is not a valid skill: {_reason(e)}") from e
    return relax_header(loose.header, loose.body, folder.name, None).name or folder.name


def _reason(error: Exception) -> str:
    if isinstance(error, SkillInvalid) and error.errors:
        return " ".join(error.errors)
    return str(error)


def read_only_skills(
    builtin_root: Path, paths: Sequence[Path]
) -> list[tuple[str, Path, SkillInfo]]:
    """Validate the built-ins (strictly) and the configured skills (as an import does); any
    refusal names its folder."""
    found = [("builtin", folder) for folder in builtin_folders(builtin_root)]
    found += [("path", folder) for folder in discover(paths)]
    checked: dict[str, tuple[str, Path, SkillInfo]] = {}
    for source, folder in found:
        try:
            if source == "builtin":
                info = validate_skill_dir(folder)
            else:
                info = read_skill_dir(folder, folder.name)
        except (SkillInvalid, SkillTooLarge) as e:
            raise ConfigError(f"Skill path {folder} is not a valid skill: {_reason(e)}") from e
        if info.name in checked:
            raise ConfigError(
                f"Skill path {folder} holds a skill named '{info.name}', "
                f"which {checked[info.name][1]} already provides."
            )
        checked[info.name] = (source, folder, info)
    return list(checked.values())

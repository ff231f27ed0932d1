"""Drafts: skills the assistant writes, saved disabled for the owner to review and enable.

A draft goes through the same staging, refusals, validation and install as an upload. The
assistant may replace a draft only while it is its own and untouched: once the owner imported,
enabled or edited a skill of that name, it is locked (`SkillLocked`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from store.archive import SKILL_FILE, Parts, Staging, split_entry_name, write_tree
from store.errors import ArchiveUnsafe, SkillBuiltin, SkillInvalid, SkillLocked
from store.models import Skill
from store.paths import inside
from store.schemas import SCHEMA_KEY
from store.skills import Origin, SkillStore
from store.validation import SkillInfo

ASSISTANT = "assistant"
DIR_MODE = 0o755
FILE_MODE = 0o644


@dataclass(frozen=True)
class Draft:
    """What draft_skill saves: the header fields, the body, the other files and why."""

    name: str
    description: str
    body: str
    files: Mapping[str, str]
    source_chats: list[str]
    rationale: str
    parameters_schema: dict[str, Any] | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


def skill_md_text(
    name: str,
    description: str,
    body: str,
    metadata: Mapping[str, Any] | None = None,
    header: Mapping[str, Any] | None = None,
) -> str:
    """A SKILL.md: the header (name and description first) between `---` lines, then the body."""
    fields: dict[str, Any] = {"name": name, "description": description}
    for key, value in (header or {}).items():
        if key not in fields and key != "metadata":
            fields[key] = value
    if metadata:
        fields["metadata"] = dict(metadata)
    front = yaml.safe_dump(fields, sort_keys=False, allow_unicode=True, width=100)
    return f"---\n{front}---\n\n{body.strip()}\n"


def with_schema(metadata: Mapping[str, Any], schema: object) -> dict[str, Any]:
    """The metadata with its parameters_schema set to `schema`, or removed for None."""
    updated = {key: value for key, value in metadata.items() if key != SCHEMA_KEY}
    if schema is not None:
        updated[SCHEMA_KEY] = schema
    return updated


def encoded(text: str, label: str) -> bytes:
    """`text` as UTF-8; a lone surrogate (possible in JSON) is refused, naming `label`."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        problem = f"{label} is not valid UTF-8 text: it holds a lone surrogate."
        raise SkillInvalid(problem, errors=[problem]) from e


def check_path(path: str) -> Parts:
    """The parts of a file path an agent or owner names, with the refusals of an import."""
    try:
        return split_entry_name(path)
    except ArchiveUnsafe as e:
        raise ArchiveUnsafe(e.message.replace("The entry", "The file", 1)) from e


def stage_files(stage: Path, name: str, files: Mapping[str, bytes]) -> Path:
    """Write `files` (path -> bytes) into the new folder `stage/name`, checked like zip entries."""
    staging = Staging()
    checked: dict[Parts, bytes] = {}
    for path, data in sorted(files.items()):
        parts = check_path(path)
        staging.add_file(parts, len(data))
        checked[parts] = data
    root = inside(stage, name)
    write_tree(root, staging.dirs, checked, dir_mode=DIR_MODE, file_mode=FILE_MODE)
    return root


def save_draft(store: SkillStore, owner_id: int, draft: Draft) -> Skill:
    """Save a new disabled draft, or replace the assistant's own untouched draft of that name."""
    metadata = with_schema(draft.metadata, draft.parameters_schema)
    text = skill_md_text(draft.name, draft.description, draft.body, metadata)
    files = {SKILL_FILE: encoded(text, SKILL_FILE)}
    files.update((path, encoded(content, path)) for path, content in draft.files.items())

    def annotate(skill: Skill, info: SkillInfo) -> None:
        skill.source_chats = list(draft.source_chats)
        skill.rationale = draft.rationale
        skill.locked = False

    with store.staging() as stage:
        root = stage_files(stage, draft.name, files)
        origin = Origin(source="draft", owner_id=owner_id, author=ASSISTANT)
        return store.install(
            root,
            origin,
            enable=False,
            replace=True,
            expected_name=draft.name,
            guard=_only_own_draft,
            annotate=annotate,
        )


def _only_own_draft(existing: Skill | None) -> None:
    if existing is None:
        return
    if existing.read_only:
        raise SkillBuiltin(
            f"HOST: '{existing.name}' is a read-only {existing.source} skill; "
            "draft under another name."
        )
    if existing.author != ASSISTANT or existing.locked:
        raise SkillLocked(
            f"HOST: '{existing.name}' was reviewed by the owner (imported, enabled or edited), "
            "so a draft can't replace it; propose a change with edit_skill."
        )

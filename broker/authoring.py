"""The authoring tools: get_skill reads any skill in full, draft_skill saves a disabled draft.

edit_skill's handler lives with the edit plans (broker/editplans.py): it only ever writes a
plan the owner approved.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from broker.classify import is_locked
from broker.context import ToolContext
from broker.errors import ChatNotFound, InvalidCall
from store.drafts import Draft, save_draft
from store.errors import SkillInvalid, SkillTooLarge
from store.frontmatter import read_loose
from store.hashing import file_digest
from store.limits import (
    MAX_DRAFT_FILES,
    MAX_RATIONALE_CHARS,
    MAX_RESOURCE_BYTES,
    MAX_SOURCE_CHATS,
)
from store.models import Chat, Skill
from store.schemas import parse_schema_text
from store.validation import format_problems

DRAFT_FIELDS = (
    "name",
    "description",
    "body",
    "files",
    "parameters_schema",
    "metadata",
    "source_chats",
    "rationale",
)
DRAFT_REQUIRED = ("name", "description", "body", "source_chats", "rationale")


def get_skill(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """One skill in full (header, body, files with sizes and digests), or one of its files."""
    skill = context.plan.skill
    assert skill is not None, "classify found the skill"
    path = arguments.get("path")
    if path is not None:
        clean, data = context.store.read_file(skill, path, MAX_RESOURCE_BYTES)
        return {
            "name": skill.name,
            "hash": skill.hash,
            "path": clean,
            "size": len(data),
            "sha256": file_digest(data),
            "content": data.decode("utf-8", "replace"),
        }
    folder = context.store.folder(skill)
    loose = read_loose((folder / "SKILL.md").read_bytes())
    info = context.store.info(skill)
    schema: Any = info.parameters_schema
    if schema is None and info.script_schemas:
        schema = info.script_schemas
    files = [
        {
            "path": entry.path,
            "size": entry.size,
            "sha256": file_digest((folder / entry.path).read_bytes()),
        }
        for entry in context.store.files(skill)
    ]
    return {
        **summary(skill),
        "hash": skill.hash,
        "locked": is_locked(skill),
        "source": skill.source,
        "header": loose.header,
        "body": loose.body,
        "parameters_schema": schema,
        "lint_warnings": skill.lint_warnings or [],
        # What the import bent to accept the skill, and the header keys it kept unread.
        "warnings": list(skill.warnings or []),
        "unknown_keys": info.unknown_keys,
        "files": files,
    }


def listed(row: Any) -> dict[str, Any]:
    """`summary` of a `SkillStore.listing` row, read by position (its columns, in order): a
    200-skill list is built in a tenth of the time attribute reads take."""
    name, description, enabled, author, execution, tier, _owner, chats, rationale = row
    entry: dict[str, Any] = {
        "name": name,
        "description": description,
        "enabled": enabled,
        "author": author,
        "execution": execution,
        "tier": tier,
    }
    if author == "assistant":
        entry["source_chats"] = chats or []
        entry["rationale"] = rationale or ""
    return entry


def summary(skill: Skill | Any) -> dict[str, Any]:
    """What list_skills shows of a skill: author, where it runs, tier; a draft's reasons."""
    return listed(
        (skill.name, skill.description, skill.enabled, skill.author, skill.execution,
         skill.tier, skill.owner_id, skill.source_chats, skill.rationale)
    )  # fmt: skip


def draft_skill(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Save a disabled draft, or replace the assistant's own untouched one; never enables it."""
    draft = read_draft(arguments)
    _check_chats(context, draft.source_chats)
    replaced = context.plan.skill is not None and context.plan.skill.owner_id is not None
    try:
        skill = save_draft(context.store, context.owner_id, draft)
    except (SkillInvalid, SkillTooLarge) as e:
        problems = " ".join(format_problems(e))
        raise type(e)(f"HOST: the draft was refused: {problems}", e.errors) from e
    return {
        "name": skill.name,
        "hash": skill.hash,
        "enabled": False,
        "replaced": replaced,
        "lint_warnings": skill.lint_warnings or [],
        "note": "Saved disabled. The owner reviews it and enables it with this hash.",
    }


def read_draft(arguments: dict[str, Any]) -> Draft:
    """draft_skill's arguments, each of its type and within the draft limits."""
    for key in arguments:
        if key not in DRAFT_FIELDS:
            raise InvalidCall(
                f"HOST: draft_skill has no field '{key}'; it reads " + ", ".join(DRAFT_FIELDS) + "."
            )
    for key in DRAFT_REQUIRED:
        if key not in arguments:
            raise InvalidCall(f"HOST: draft_skill needs the field '{key}'.")
    texts = {key: _string(arguments, key) for key in ("name", "description", "body", "rationale")}
    if len(texts["rationale"]) > MAX_RATIONALE_CHARS:
        raise InvalidCall(
            f"HOST: the rationale is {len(texts['rationale'])} characters; "
            f"keep it to {MAX_RATIONALE_CHARS}."
        )
    files = _mapping(arguments, "files", "text")
    if "SKILL.md" in files:
        raise InvalidCall(
            "HOST: SKILL.md is written from name, description, body and parameters_schema; "
            "leave it out of files."
        )
    if len(files) > MAX_DRAFT_FILES:
        raise SkillTooLarge(
            f"HOST: files holds {len(files)} files; a draft takes at most {MAX_DRAFT_FILES}."
        )
    chats = arguments["source_chats"]
    if not isinstance(chats, list) or not all(isinstance(c, str) and c for c in chats):
        raise InvalidCall("HOST: source_chats must be a list of chat ids (strings).")
    if len(chats) > MAX_SOURCE_CHATS:
        raise InvalidCall(
            f"HOST: source_chats names {len(chats)} chats; a draft names at most "
            f"{MAX_SOURCE_CHATS}."
        )
    return Draft(
        name=texts["name"],
        description=texts["description"],
        body=texts["body"],
        files=files,
        source_chats=list(dict.fromkeys(chats)),
        rationale=texts["rationale"],
        parameters_schema=_schema(arguments.get("parameters_schema")),
        metadata=_mapping(arguments, "metadata", "string value"),
    )


def _schema(value: object) -> dict[str, Any] | None:
    """parameters_schema as an object, or as its JSON text (parsed: SKILL.md gets the object)."""
    if isinstance(value, str):
        try:
            return parse_schema_text(value)
        except SkillInvalid as e:
            raise SkillInvalid(f"HOST: the draft was refused: {e.message}", e.errors) from e
    if value is not None and not isinstance(value, dict):
        raise InvalidCall("HOST: parameters_schema must be a JSON Schema object or its JSON text.")
    return value


def _string(arguments: dict[str, Any], key: str) -> str:
    value = arguments[key]
    if not isinstance(value, str) or not value.strip():
        raise InvalidCall(f"HOST: draft_skill's field '{key}' must be a non-empty string.")
    return value


def _mapping(arguments: dict[str, Any], key: str, what: str) -> dict[str, str]:
    value = arguments.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidCall(f"HOST: draft_skill's field '{key}' must map names to {what}.")
    return dict(value)


def _check_chats(context: ToolContext, chat_ids: list[str]) -> None:
    if not chat_ids:
        return
    query = select(Chat.external_id).where(
        Chat.owner_id == context.owner_id, Chat.external_id.in_(chat_ids)
    )
    with context.sessions() as session:
        known = set(session.scalars(query))
    missing = [chat for chat in chat_ids if chat not in known]
    if missing:
        raise ChatNotFound(f"HOST: source_chats names '{missing[0][:200]}', which is not a chat.")

"""The skill tools agents call: progressive disclosure of the store's enabled skills."""

from __future__ import annotations

import base64
import re
from typing import Any

from sqlalchemy import update

from broker import loaded
from broker.authoring import draft_skill, get_skill, listed
from broker.chatreview import CHAT_ID
from broker.classify import DISABLED
from broker.context import RunStarted, ToolContext
from broker.editing import apply_plan
from broker.errors import InvalidCall, SkillDisabled
from broker.registry import Tool
from broker.tiers import Tier
from store.db import core_transaction
from store.errors import SkillNotFound
from store.limits import MAX_RESOURCE_BYTES
from store.models import Chat, Skill

SKILL_NAME = {"type": "string", "description": "The skill's name, as list_skills gives it."}
WORD = re.compile(r"[a-z0-9]+")


def _string_arg(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidCall(f"'{key}' must be a non-empty string.")
    return value


def _enabled_skill(context: ToolContext, name: str) -> Skill:
    """The skill the call was planned for (the owner's, checked then), or looked up now."""
    planned = context.plan.skill
    skill = planned if planned is not None else context.store.get(context.owner_id, name)
    if not skill.enabled:
        raise SkillDisabled(DISABLED)
    return skill


def list_skills(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """Each enabled skill (with include_disabled, every one), ranked by `query` when given."""
    query = arguments.get("query")
    if query is not None and not isinstance(query, str):
        raise InvalidCall("'query' must be a string.")
    include_disabled = arguments.get("include_disabled", False)
    if not isinstance(include_disabled, bool):
        raise InvalidCall("'include_disabled' must be true or false.")
    installed = context.store.listing(context.owner_id, enabled_only=not include_disabled)
    if query and query.strip():
        rows = {row[0]: row for row in installed}  # by name, read by position (see listing)
        installed = [rows[name] for name, _ in _ranked([(r[0], r[1]) for r in installed], query)]
    skills = [listed(row) for row in installed]
    if not query and not include_disabled:
        _remember_catalog(context, [entry["name"] for entry in skills])
    return {"skills": skills, "count": len(skills)}


def _ranked(catalog: list[tuple[str, str]], query: str) -> list[tuple[str, str]]:
    words = set(WORD.findall(query.lower()))
    scored = []
    for name, description in catalog:
        name_words = set(WORD.findall(name))
        text_words = WORD.findall(description.lower())
        score = sum(3 for w in words if w in name_words) + sum(1 for w in text_words if w in words)
        if score:
            scored.append((-score, name, description))
    return [(name, description) for _score, name, description in sorted(scored)]


def load_skill(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The SKILL.md body, resources and scripts with their schemas; a note when the call's
    context holds them already (broker/loaded.py says when)."""
    name = _string_arg(arguments, "skill_name")
    skill = _enabled_skill(context, name)
    # The activation is recorded either way: the chat's turns and web grants read it.
    held = context.chat is not None and loaded.holds(context, skill)
    if held and not context.full_loads:
        return {
            "name": name,
            "already_loaded": True,
            "note": f"The skill '{name}' is already in your context: follow the "
            f'<skill_content name="{name}"> you were given.',
        }
    return loaded.skill_content(context.store, skill)


def read_skill_resource(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """One file of an enabled skill, confined to that skill's folder; text comes in
    `<skill_resource>` tags."""
    name = _string_arg(arguments, "skill_name")
    skill = _enabled_skill(context, name)
    path, data = context.store.read_file(skill, arguments.get("path"), MAX_RESOURCE_BYTES)
    result: dict[str, Any] = {"skill_name": name, "path": path, "size": len(data)}
    try:
        result["content"] = loaded.resource_content(name, path, data.decode("utf-8"))
    except UnicodeDecodeError:
        result["content_base64"] = base64.b64encode(data).decode("ascii")
    return result


def refresh_skills(context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
    """The enabled skills now, and what was added or removed since this chat last looked."""
    names = [name for name, _description in context.store.catalog(context.owner_id)]
    known = _remember_catalog(context, names)
    if known is None:
        return {"skills": names, "added": names, "removed": []}
    return {
        "skills": names,
        "added": sorted(set(names) - set(known)),
        "removed": sorted(set(known) - set(names)),
    }


def _remember_catalog(context: ToolContext, names: list[str]) -> list[str] | None:
    """Store the names this chat has now seen; returns what it had seen before.

    What it had seen is the chat's row as this call read it (broker.Broker._admit): a listing
    that shows nothing new writes nothing.
    """
    if context.chat is None:
        return None
    before = context.chat.known_skills
    if before != names:
        with core_transaction(context.sessions) as connection:
            connection.execute(
                update(Chat).where(Chat.id == context.chat.id).values(known_skills=names)
            )
    return before


def run_skill_script(
    context: ToolContext, arguments: dict[str, Any]
) -> dict[str, Any] | RunStarted:
    """Hand the planned script run to the dispatcher; the plan was checked before the policy."""
    plan = context.plan
    if plan.skill is None:
        name = arguments.get("skill_name")
        raise SkillNotFound(f"HOST: there is no skill named {name!r}; call list_skills.")
    if not plan.skill.enabled:
        raise SkillDisabled(DISABLED)
    return context.dispatcher.dispatch(context)


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


TOOLS = (
    Tool(
        "list_skills",
        Tier.READ,
        "Lists the enabled skills: name, description, author, where it runs (execution) and "
        "tier; drafts also show their source chats and rationale. Pass `query` to rank them by "
        "keywords and `include_disabled` to see disabled skills and drafts too. Call load_skill "
        "before following a skill.",
        _object(
            {
                "query": {"type": "string", "description": "Keywords to rank by."},
                "include_disabled": {
                    "type": "boolean",
                    "description": "Also list disabled skills and drafts.",
                },
            },
            [],
        ),
        list_skills,
    ),
    Tool(
        "load_skill",
        Tier.READ,
        "Loads a skill's instructions (SKILL.md body), its resource list and its scripts "
        "with their argument schemas.",
        _object({"skill_name": SKILL_NAME}, ["skill_name"]),
        load_skill,
        aliases=("activate_skill",),
    ),
    Tool(
        "read_skill_resource",
        Tier.READ,
        "Reads one file of a skill, such as references/guide.md or scripts/run.py.",
        _object(
            {
                "skill_name": SKILL_NAME,
                "path": {"type": "string", "description": "A path relative to the skill folder."},
            },
            ["skill_name", "path"],
        ),
        read_skill_resource,
        aliases=("load_skill_resource",),
    ),
    Tool(
        "refresh_skills",
        Tier.READ,
        "Reloads the set of enabled skills and reports which were added or removed.",
        _object({}, []),
        refresh_skills,
    ),
    Tool(
        "run_skill_script",
        Tier.CHANGE,
        "Runs one of a skill's scripts on the skill's runner, in a working directory of its "
        "own. A script that reads its command line gets `args`, as SKILL.md shows it (`python "
        'scripts/x.py in.pdf out.json` is script scripts/x.py with args ["in.pdf", '
        '"out.json"]); one that reads JSON gets `arguments`. `files` places files in the '
        "working directory: a path to a file id (POST /api/files, or a file an earlier run "
        'made) or to {"content_base64": ...} for a small one. Every file the run creates '
        "or changes comes back in the result's `files`, each with an id. `node` says where: "
        'one of your nodes (list_nodes), or "spark" or "sandbox" as the skill\'s execution '
        "allows; node skills need it, and a skill whose execution is auto runs on the Spark "
        "without it while a Spark worker serves.",
        _object(
            {
                "skill_name": SKILL_NAME,
                "script": {"type": "string", "description": "A script path such as scripts/x.py."},
                "args": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "The script's command line after its path, passed as given "
                    '(no shell), such as ["in.pdf", "out.json"].',
                },
                "arguments": {"type": "object", "description": "The script's JSON arguments."},
                "files": {
                    "type": "object",
                    "additionalProperties": {
                        "anyOf": [
                            {"type": "string", "description": "A file id."},
                            {
                                "type": "object",
                                "properties": {"content_base64": {"type": "string"}},
                                "required": ["content_base64"],
                            },
                        ]
                    },
                    "description": "Files to place in the working directory, by relative path.",
                },
                "node": {
                    "type": "string",
                    "description": 'Where to run: a node\'s name, or "spark" or "sandbox".',
                },
            },
            ["skill_name", "script"],
        ),
        run_skill_script,
    ),
    Tool(
        "get_skill",
        Tier.READ,
        "Reads one skill in full, enabled or not: hash, enabled, locked, author, source, every "
        "header key, the body, parameters_schema, review warnings and the files with their "
        "size and sha256; with `path`, one file's content. Never runs anything.",
        _object(
            {
                "skill_name": SKILL_NAME,
                "path": {"type": "string", "description": "One file to read, such as SKILL.md."},
            },
            ["skill_name"],
        ),
        get_skill,
    ),
    Tool(
        "draft_skill",
        Tier.DRAFT,
        "Saves a new skill as a disabled draft for the owner to review and enable, or replaces "
        "your own draft of that name while the owner has not imported, enabled or edited it. "
        "SKILL.md is written from name, description, body, metadata and parameters_schema; "
        "`files` holds the other files (at most 40). Returns the hash and review warnings.",
        _object(
            {
                "name": {"type": "string", "description": "The skill's name: a-z, 0-9, '-'."},
                "description": {
                    "type": "string",
                    "description": "What the skill does and when to use it.",
                },
                "body": {"type": "string", "description": "SKILL.md's instructions (Markdown)."},
                "files": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Other files: path (such as scripts/check.py) -> text.",
                },
                "parameters_schema": {
                    "type": ["object", "string"],
                    "description": "JSON Schema of the scripts' arguments, or a map script "
                    "path -> schema, as an object or its JSON text; a script's `argv` lists "
                    "what it gets on its command line.",
                },
                "metadata": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "Header metadata such as skillfleet.tier, "
                    "skillfleet.execution, skillfleet.allowed-domains.",
                },
                "source_chats": {
                    "type": "array",
                    "items": CHAT_ID,
                    "description": "The chats this skill comes from (at most 10).",
                },
                "rationale": {
                    "type": "string",
                    "description": "Why this skill helps (at most 1,000 characters).",
                },
            },
            ["name", "description", "body", "source_chats", "rationale"],
        ),
        draft_skill,
    ),
    Tool(
        "edit_skill",
        Tier.SKILL_EDIT,
        "Proposes a change to one of the owner's skills. The owner sees it as a diff and "
        "approves it before anything is written; it applies only if the skill did not change "
        "meanwhile. Fields are read exactly: no unknown or repeated names.",
        _object(
            {
                "skill_name": SKILL_NAME,
                "changes": {
                    "type": "object",
                    "properties": {
                        "files": {
                            "type": "object",
                            "additionalProperties": {"type": ["string", "null"]},
                            "description": "path -> the file's new text, or null to delete it.",
                        },
                        "description": {"type": "string"},
                        "body": {"type": "string", "description": "SKILL.md's new body."},
                        "parameters_schema": {"type": ["object", "string", "null"]},
                    },
                    "additionalProperties": False,
                },
                "rationale": {
                    "type": "string",
                    "description": "Why (at most 1,000 characters); the owner reads it.",
                },
            },
            ["skill_name", "changes", "rationale"],
        ),
        apply_plan,
    ),
)

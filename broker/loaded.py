"""What a chat has loaded: the skill content its turns keep, and when a load is a repeat.

A turn the server runs (`workers/turns.py`) sees only the prompts and answers of the chat's
last turns, so the tool results of earlier turns are gone from its context. Skill content is
exempt (seed 004: `<skill_content>` and `<skill_resource>` survive compaction): every turn of a
chat starts with the chat's loaded skills, each as load_skill gave it, and the text resources it
read since, each as read_skill_resource gave it, while the skill still has the hash they were
read at and is enabled.

load_skill answers `already_loaded` only when the call's context holds the skill at its
current hash:

- a call with a `turn_id`: an earlier load_skill of the same turn and chat gave it, or the turn
  is one the server runs for this chat and carried it from its start;
- a call without one: the chat loaded it before (the chat is one context, as the client keeps
  it).

So an agent that manages its own context and sends a new `turn_id` gets the content again on
its first load in that turn. A call with `full_loads` (the MCP gateway's, for the chat it names
after a client whose conversations it can't tell apart) gets the content every time; its load
is recorded all the same.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from broker.context import ToolContext
from broker.grants import host_key
from broker.results import shape_result
from store.db import core_transaction
from store.errors import SkillfleetError
from store.limits import CARRIED_READS, CARRIED_RESOURCE_BYTES, MAX_RESOURCE_BYTES
from store.models import Chat, ChatActivation, Skill, ToolCall, Turn, utcnow
from store.schemas import argv_of, schema_for
from store.skills import SkillStore
from store.states import CallStatus
from store.validation import SkillInfo

CARRIED_HEAD = (
    "Skills loaded earlier in this chat stay in your context for every turn: follow them as "
    "when you loaded them. load_skill answers already_loaded for these."
)
NOT_CARRIED = "Resources read earlier but too long to keep here (read them again if needed):"


# Where a run finds its skill, from the working directory it starts in, on every tier: a node
# run's folder holds work/ and skill/ side by side, a container's /work and /skill.
BASE_PATH = "../skill"


def skill_content(store: SkillStore, skill: Skill) -> dict[str, Any]:
    """load_skill's answer: the SKILL.md body in `<skill_content>`, resources and scripts."""
    info = store.info(skill)
    files = [entry.path for entry in store.files(skill) if entry.path != "SKILL.md"]
    reads = store.script_inputs(skill)
    scripts = [
        {"path": p, "input": _input(info, p, reads.get(p)), "schema": schema_for(info, p)}
        for p in store.scripts(skill)
    ]
    base_path = BASE_PATH
    return {
        "name": skill.name,
        "hash": skill.hash,
        "base_path": base_path,
        "content": _wrapped(skill.name, info.body, base_path, files, scripts),
        "resources": files,
        "scripts": scripts,
        "execution": skill.execution,
        "tier": skill.tier,
        **_secrets(info.secrets),
    }


def _secrets(names: tuple[str, ...]) -> dict[str, Any]:
    """The owner's secrets the scripts get as environment variables: names only, never values."""
    if not names:
        return {}
    note = (
        f"The scripts read {', '.join(names)} from their environment; the owner gives each "
        "value. A run lacking one fails with secret_missing: ask for it with request_secret."
    )
    return {"secrets": list(names), "secrets_note": note}


def resource_content(name: str, path: str, text: str) -> str:
    """A resource's text in the `<skill_resource>` tags that mark it as skill content."""
    return f'<skill_resource name="{name}" path="{html.escape(path)}">\n{text}\n</skill_resource>'


def _input(info: SkillInfo, path: str, read: str | None) -> str:
    """How a script takes its input: `args` (it reads its command line and declares none),
    `arguments` (JSON, or a command line its schema builds from them)."""
    if read is not None and not argv_of(info, path):
        return "args"
    return "arguments"


# What each kind of script wants in run_skill_script, for the model reading the skill.
INPUT_HINTS = {
    "args": "reads its command line: send it as args, as SKILL.md writes it after the script",
    "arguments": "takes arguments (JSON) matching this schema",
}


def _wrapped(
    name: str, body: str, base_path: str, files: list[str], scripts: list[dict[str, Any]]
) -> str:
    resources = "\n".join(f"  <file>{path}</file>" for path in files)
    available = "\n".join(
        f'  <script path="{s["path"]}" input="{s["input"]}">{INPUT_HINTS[s["input"]]}: '
        f"{_compact(s['schema'])}</script>"
        for s in scripts
    )
    parts = [
        f'<skill_content name="{name}">',
        body.rstrip(),
        "",
        f"Skill directory: {base_path}",
        "Relative paths in this skill are relative to the skill directory; read them with "
        "read_skill_resource and run scripts with run_skill_script. A script runs in a "
        f"working directory of its own, with the skill at {base_path}: run_skill_script's "
        "files are placed there, and every file the script writes there comes back by id.",
        "",
        f"<skill_resources>\n{resources}\n</skill_resources>",
    ]
    if scripts:
        parts.append(f"<available_scripts>\n{available}\n</available_scripts>")
    parts.append("</skill_content>")
    return "\n".join(parts)


def _compact(schema: dict[str, Any]) -> str:
    return json.dumps(schema, separators=(",", ":"), sort_keys=True)


# -- a repeat load -----------------------------------------------------------------


def holds(context: ToolContext, skill: Skill) -> bool:
    """Record the chat's activation; True when the call's context already holds this content.

    One Core transaction (most loads of a turn only read): a Session's bookkeeping would cost
    as much again as the statements.
    """
    assert context.chat is not None
    key = {"chat_id": context.chat.id, "skill_name": skill.name}
    try:
        with core_transaction(context.sessions) as connection:
            row = connection.execute(_ACTIVATION, key).first()
            if row is None:
                values = {**key, "skill_hash": skill.hash, "activated_at": utcnow()}
                connection.execute(insert(ChatActivation).values(values))
                return False
            if row.skill_hash != skill.hash:
                connection.execute(
                    update(ChatActivation)
                    .where(
                        ChatActivation.chat_id == context.chat.id,
                        ChatActivation.skill_name == skill.name,
                    )
                    .values(skill_hash=skill.hash, activated_at=utcnow())
                )
                return False
            if context.turn_id is None:
                return True
            return _loaded_this_turn(connection, context, skill) or _carried_into_turn(
                connection, context, row.activated_at
            )
    except IntegrityError:  # a load of the same skill in the same chat saved it first
        return False


_ACTIVATION = select(ChatActivation.skill_hash, ChatActivation.activated_at).where(
    ChatActivation.chat_id == bindparam("chat_id"),
    ChatActivation.skill_name == bindparam("skill_name"),
)


def _loaded_this_turn(connection: Connection, context: ToolContext, skill: Skill) -> bool:
    assert context.chat is not None
    earlier = connection.scalar(
        select(ToolCall.id)
        .where(
            ToolCall.turn_id == context.turn_id,
            ToolCall.chat_id == context.chat.id,
            ToolCall.tool == "load_skill",
            ToolCall.status == CallStatus.DONE,
            ToolCall.skill_name == skill.name,
            ToolCall.skill_hash == skill.hash,
        )
        .limit(1)
    )
    return earlier is not None


def _carried_into_turn(connection: Connection, context: ToolContext, since: datetime) -> bool:
    """True when the call's turn is the server's turn of this chat, started after the load."""
    assert context.chat is not None
    started = connection.scalar(
        select(Turn.started_at).where(
            Turn.id == context.turn_id,
            Turn.owner_id == context.owner_id,
            Turn.chat_id == context.chat.external_id,
        )
    )
    return started is not None and since <= started


# -- hosts its skills allow ---------------------------------------------------------


def host_grants(store: SkillStore, session: Session, owner_id: int, chat_id: int) -> frozenset[str]:
    """`host:<d>` for every allowed domain (`skillfleet.allowed-domains`) of the skills the chat
    has loaded, while each is enabled and has the hash it was loaded at: a skill changed since
    grants nothing until the chat loads it again. Hosts match exactly, as listed."""
    loaded = session.execute(
        select(ChatActivation.skill_name, ChatActivation.skill_hash).where(
            ChatActivation.chat_id == chat_id
        )
    ).all()
    keys: set[str] = set()
    for name, skill_hash in loaded:
        skill = _still(store, owner_id, name, skill_hash)
        if skill is not None:
            keys.update(host_key(domain) for domain in store.info(skill).allowed_domains)
    return frozenset(keys)


# -- what a turn carries -----------------------------------------------------------


@dataclass
class Carried:
    """The skill content a chat's next turn starts with."""

    skills: list[str] = field(default_factory=list)
    resources: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The block added to the turn's system message; empty when nothing is carried."""
        if not self.skills and not self.resources:
            return ""
        parts = [CARRIED_HEAD, *self.skills, *self.resources]
        if self.left_out:
            parts.append(f"{NOT_CARRIED} {', '.join(self.left_out)}")
        return "\n\n".join(parts)


# What a turn carries of its chat, read before every answer: statements built once, the
# chat's row found by the client's id within each.
_CHAT = (
    select(Chat.id)
    .where(Chat.owner_id == bindparam("owner_id"), Chat.external_id == bindparam("chat_id"))
    .scalar_subquery()
)
_LOADED = (
    select(ChatActivation.skill_name, ChatActivation.skill_hash)
    .where(ChatActivation.chat_id == _CHAT)
    .order_by(ChatActivation.activated_at, ChatActivation.skill_name)
)
_READS = (
    select(ToolCall.skill_name, ToolCall.skill_hash, ToolCall.arguments)
    .where(
        ToolCall.owner_id == bindparam("owner_id"),
        ToolCall.chat_id == _CHAT,
        ToolCall.tool == "read_skill_resource",
        ToolCall.status == CallStatus.DONE,
    )
    .order_by(ToolCall.created_at.desc())
    .limit(CARRIED_READS)
)


def carried(
    store: SkillStore,
    connection: Connection,
    owner_id: int,
    chat_id: str,
    budget: int = CARRIED_RESOURCE_BYTES,
) -> Carried:
    """What the chat `chat_id` (the client's id) has loaded and still holds, as it was given.

    Text is redacted and capped as the tool results were; resources fill `budget` bytes from the
    newest read back, and those that don't fit are named so the model can read them again.
    """
    parameters = {"owner_id": owner_id, "chat_id": chat_id}
    loaded = connection.execute(_LOADED, parameters).all()
    reads = connection.execute(_READS, parameters).all()
    found = Carried()
    for name, skill_hash in loaded:
        skill = _still(store, owner_id, name, skill_hash)
        if skill is not None:
            found.skills.append(_text(skill_content(store, skill)["content"]))
    _add_resources(found, store, owner_id, reads, budget)
    return found


def _add_resources(
    found: Carried, store: SkillStore, owner_id: int, reads: Iterable[Any], budget: int
) -> None:
    seen: set[tuple[str, str]] = set()
    kept: list[str] = []
    for name, skill_hash, arguments in reads:
        skill = _still(store, owner_id, name, skill_hash)
        text = _resource(store, skill, arguments) if skill is not None else None
        if text is None or (name, text[0]) in seen:
            continue
        seen.add((name, text[0]))
        block = _text(resource_content(name, *text))
        size = len(block.encode())
        if size > budget:
            found.left_out.append(f"{name}/{text[0]}")
            continue
        budget -= size
        kept.append(block)
    found.resources = kept[::-1]  # in the order they were read
    found.left_out.reverse()


def _still(
    store: SkillStore, owner_id: int, name: str | None, skill_hash: str | None
) -> Skill | None:
    """The skill `name` when it is enabled and still has the hash it was read at."""
    if name is None:
        return None
    try:
        skill = store.get(owner_id, name)
    except SkillfleetError:
        return None  # removed since
    return skill if skill.enabled and skill.hash == skill_hash else None


def _resource(store: SkillStore, skill: Skill, arguments: Any) -> tuple[str, str] | None:
    """The path and text of a resource read before; None for a binary or vanished one."""
    path = arguments.get("path") if isinstance(arguments, dict) else None
    try:
        path, data = store.read_file(skill, path, MAX_RESOURCE_BYTES)
        return path, data.decode("utf-8")
    except (SkillfleetError, OSError, UnicodeDecodeError):
        return None


def _text(value: str) -> str:
    """The text as a tool result shows it: credentials redacted, cut at the result cap."""
    shaped = shape_result(value)
    assert isinstance(shaped, str)  # a string is shaped into a string
    return shaped

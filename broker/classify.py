"""Classifying a call before the policy sees it: tier, grant key, skill facts, arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import jsonschema
import redis

from broker.arguments import MISSING, normalize
from broker.commands import Command, read_command
from broker.editargs import read_edit
from broker.editplans import EditDraft, plan_edit
from broker.errors import (
    InvalidCall,
    SchemaMismatch,
    ScriptNotFound,
    ScriptNotSupported,
    SkillDisabled,
    ToolNotImplemented,
)
from broker.grants import tool_key
from broker.placement import RUNNERS, place, with_target
from broker.registry import Tool
from broker.runinputs import read_args, read_files
from broker.tiers import Tier
from broker.webtools import PageReader
from store import ownersecrets
from store.commandline import CommandLineError, command_line
from store.errors import SkillNotFound, VersionNotFound, VersionNotKept
from store.files import FileStore
from store.hashing import grant_key
from store.models import Skill
from store.names import AUTO, is_valid_name
from store.pinned import pinned_view
from store.schemas import argv_of, schema_for
from store.skills import SkillStore
from store.validation import SkillInfo
from store.versions import parse_pin

SKILL_TOOLS = frozenset(
    {"load_skill", "read_skill_resource", "run_skill_script", "get_skill", "draft_skill",
     "edit_skill"}
)  # fmt: skip
# Tools that act on an existing skill: naming none fails the call at once.
NEEDS_SKILL = SKILL_TOOLS - {"draft_skill"}
# Tools that only work on an enabled skill.
NEEDS_ENABLED = frozenset({"load_skill", "read_skill_resource", "run_skill_script"})
RUN = "run_skill_script"
COMMAND = "run_command"
EDIT = "edit_skill"
NEVER_GRANTED = frozenset({EDIT})
# Tools whose arguments are read exactly: a field given twice in the JSON body is refused.
READ_EXACTLY = frozenset({EDIT})
DISABLED = "HOST: that skill is no longer enabled."
# What the sandbox runner can run (Python and JavaScript guests).
SANDBOX_SUFFIXES = (".py", ".js", ".mjs")


@dataclass(frozen=True)
class CallPlan:
    """Everything the broker decided about a call before asking the policy."""

    tool: Tool
    tier: str
    arguments: dict[str, Any]
    grant_key: str | None
    skill: Skill | None = None
    skill_enabled: bool = True
    skill_locked: bool = False
    target_is_draft: bool = False
    script: str | None = None
    script_arguments: dict[str, Any] = field(default_factory=dict)
    node: str | None = None
    # run_skill_script: where the run goes (`node`, `spark`, `sandbox`; broker/placement.py).
    execution: str | None = None
    network: str = "none"
    edit: EditDraft | None = None  # edit_skill: the checked plan the owner is shown
    command: Command | None = None  # run_command: the argv, node and timeout it runs with
    # run_skill_script: the call's own command line (`args`; None: from the argv schema), the
    # command line the script gets either way, and the files placed in its working directory.
    args: tuple[str, ...] | None = None
    argv: tuple[str, ...] = ()
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def offers_grant(self, in_job: bool) -> bool:
        """Whether "approve always" may be offered: in a chat, never for destructive calls.

        In a job the grant is saved to the job, whose grants may allow destructive tools.
        """
        return self.grant_key is not None and (in_job or self.tier != Tier.DESTRUCTIVE)


def plan_call(
    tool: Tool,
    arguments: dict[str, Any],
    store: SkillStore,
    owner_id: int,
    client: redis.Redis | None = None,
    files: FileStore | None = None,
) -> CallPlan:
    """Classify a call; a call that could only fail fails here, before any policy or owner.

    For run_skill_script the script and its arguments are read and checked once; for
    run_command the command and its node (live, when `client` can tell).
    """
    if not tool.implemented:
        raise ToolNotImplemented(f"HOST: {tool.name} is not available in this release yet.")
    if tool.name == COMMAND:
        return plan_command(tool, arguments, store, owner_id, client)
    if isinstance(tool.handler, PageReader):  # read_web_page: the URL's host is the grant
        target = tool.handler.target(arguments)
        return CallPlan(tool, str(tool.tier), {"url": target.url}, target.grant_key)
    skill, pinned = _named_skill(tool, arguments, store, owner_id)
    if tool.name == RUN:
        assert skill is not None
        return _plan_run(tool, arguments, store, skill, owner_id, client, files, pinned)
    edit = None
    if tool.name == EDIT:
        assert skill is not None
        read = read_edit(arguments)
        edit = plan_edit(store, skill, read)
        arguments = read.as_json()
    key = None if tool.name in NEVER_GRANTED else tool_key(tool.name)
    return CallPlan(
        tool=tool,
        tier=str(tool.tier),
        arguments=arguments,
        grant_key=key,
        skill=skill,
        skill_enabled=skill.enabled if skill is not None else True,
        skill_locked=skill is not None and is_locked(skill),
        target_is_draft=skill is not None and skill.author == "assistant" and not skill.locked,
        edit=edit,
    )


def plan_command(
    tool: Tool,
    arguments: dict[str, Any],
    store: SkillStore,
    owner_id: int,
    client: redis.Redis | None,
) -> CallPlan:
    """run_command: the exact node and argv the owner approves, and the approved call runs."""
    command = read_command(arguments, store.sessions, owner_id, client)
    return CallPlan(
        tool=tool,
        tier=str(tool.tier),
        arguments=command.as_json(),
        grant_key=tool_key(tool.name),
        node=command.node,
        command=command,
    )


def is_locked(skill: Skill) -> bool:
    """Whether a draft may no longer replace the skill: the owner imported, enabled or edited it."""
    return skill.locked or skill.read_only or skill.author != "assistant"


def _named_skill(
    tool: Tool, arguments: dict[str, Any], store: SkillStore, owner_id: int
) -> tuple[Skill | None, bool]:
    """The skill a skill tool names, as the owner sees it (None for other tools), and whether
    the call pins its version (`name@<hash>`: then the skill as it was at that version)."""
    if tool.name not in SKILL_TOOLS:
        return None, False
    name = arguments.get("skill_name", arguments.get("skillName", arguments.get("name")))
    name, pinned = _pinned(name) if tool.name == RUN else (name, None)
    if tool.name not in NEEDS_SKILL and not (isinstance(name, str) and is_valid_name(name)):
        return None, False
    if not isinstance(name, str) or not name:
        raise InvalidCall("HOST: 'skill_name' must name a skill, as list_skills gives it.")
    try:
        skill = store.get(owner_id, name)
    except SkillNotFound:
        if tool.name not in NEEDS_SKILL:
            return None, False
        shown = name if len(name) <= 64 else name[:61] + "..."
        raise SkillNotFound(f"HOST: there is no skill named {shown!r}; call list_skills.") from None
    if tool.name in NEEDS_ENABLED and not skill.enabled:
        raise SkillDisabled(DISABLED)
    if pinned is not None and pinned != skill.hash:
        # The pinned version runs as it was, whatever the skill is at now (store/pinned.py).
        try:
            return pinned_view(store, skill, pinned), True
        except (VersionNotFound, VersionNotKept) as e:
            raise type(e)(f"HOST: {e.message}") from None
    return skill, pinned is not None


def _pinned(name: object) -> tuple[object, str | None]:
    """A skill named with its version (`name@<64-hex hash>`, as a job step may pin it) as the
    name and the hash; any other name as it is, with no hash."""
    if not isinstance(name, str) or "@" not in name:
        return name, None
    bare, skill_hash = parse_pin(name)
    if bare is None or skill_hash is None:
        raise InvalidCall("HOST: a skill is named 'name' or 'name@<64-hex hash>'.")
    return bare, skill_hash


def _plan_run(
    tool: Tool,
    arguments: dict[str, Any],
    store: SkillStore,
    skill: Skill,
    owner_id: int,
    client: redis.Redis | None,
    file_store: FileStore | None,
    pinned: bool,
) -> CallPlan:
    script = arguments.get("script")
    if not isinstance(script, str) or not script:
        raise InvalidCall(
            "HOST: 'script' must name one of the skill's scripts, such as 'scripts/x.py'."
        )
    scripts = store.scripts(skill)
    if script not in scripts:
        listed = ", ".join(scripts) or "none"
        raise ScriptNotFound(
            f"HOST: the skill '{skill.name}' has no script {script[:200]!r}; it has: {listed}."
        )
    normalised = normalize(
        arguments.get("arguments"),
        arguments.get("node", MISSING),
        execution=AUTO,  # a missing node is placement's to refuse, naming the owner's nodes
        skill=skill.name,
        script=script,
    )
    placed = place(store.sessions, client, owner_id, skill, normalised.arguments.get("node"))
    if placed.execution == "sandbox" and PurePosixPath(script).suffix not in SANDBOX_SUFFIXES:
        raise ScriptNotSupported(
            f"HOST: sandboxed skills run .py, .js and .mjs scripts only; '{script}' can't run."
        )
    info = store.info(skill)
    validator = _validator(info, skill.hash, script)
    checked = normalised.arguments
    if skill.execution in RUNNERS:  # a node naming the skill's own runner says nothing more
        checked = {k: v for k, v in checked.items() if k != "node"}
    error = jsonschema.exceptions.best_match(validator.iter_errors(checked))
    if error is not None:
        raise SchemaMismatch(f"HOST: arguments don't match {script}'s parameters: {error.message}.")
    script_arguments = {k: v for k, v in normalised.arguments.items() if k != "node"}
    declared = argv_of(info, script)
    args = read_args(arguments.get("args"), bool(declared), script)
    try:  # what JSON Schema can't say of a command line, before anyone is asked to approve
        argv = tuple(command_line(declared, script_arguments)) if args is None else args
    except CommandLineError as e:
        raise SchemaMismatch(e.message) from e
    check_secrets(store, owner_id, skill, info.secrets)
    files = read_files(arguments.get("files"), file_store, owner_id)
    # The arguments name where it runs: the owner approves that, and a resumed call runs there.
    # A pinned call shows its version: the owner approves that content, and it is what runs.
    shown: dict[str, Any] = {
        "skill_name": f"{skill.name}@{skill.hash}" if pinned else skill.name, "script": script,
        "arguments": with_target(normalised.arguments, placed),
    }  # fmt: skip
    if args is not None:
        shown["args"] = list(args)
    if files:
        shown["files"] = files
    return CallPlan(
        tool=tool,
        tier=skill.tier,
        arguments=shown,
        grant_key=grant_key(skill.name, skill.hash),
        skill=skill,
        skill_enabled=skill.enabled,
        script=script,
        # The node says where to run; the rest of the arguments go to the script (seed 000).
        script_arguments=script_arguments,
        node=placed.target,
        execution=placed.execution,
        network=run_network(placed.execution, info.allowed_domains),
        args=args,
        argv=argv,
        files=files,
    )


def check_secrets(store: SkillStore, owner_id: int, skill: Skill, names: tuple[str, ...]) -> None:
    """Fail a run whose skill declares a secret that is not set, or whose version the owner
    has not allowed to have its secrets: a call that cannot run is never put to the owner."""
    if not names:
        return
    with store.sessions() as session:
        ownersecrets.check(session, owner_id, skill.name, skill.hash, names)


# Compiled validators of scripts' schemas, by content hash, script and execution: the schema is
# read from the skill's files, so a hash names it for good. Cleared when full (MAX_VALIDATORS).
_VALIDATORS: dict[tuple[str, str, str], jsonschema.Draft202012Validator] = {}
MAX_VALIDATORS = 512


def _validator(info: SkillInfo, skill_hash: str, script: str) -> jsonschema.Draft202012Validator:
    """The compiled validator of the script's schema, built once per content hash and
    execution (which adds `node`)."""
    key = (skill_hash, script, info.execution)
    found = _VALIDATORS.get(key)
    if found is None:
        if len(_VALIDATORS) >= MAX_VALIDATORS:
            _VALIDATORS.clear()
        found = _VALIDATORS[key] = jsonschema.Draft202012Validator(schema_for(info, script))
    return found


def run_network(execution: str, domains: tuple[str, ...]) -> str:
    """A Spark or sandbox script reaches a network only when its skill lists allowed-domains,
    and then only those hosts (the runner's egress gate); `skillfleet.network` opens nothing."""
    if execution in ("spark", "sandbox") and domains:
        return "bridge"
    return "none"

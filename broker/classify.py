"""Classifying a call before the policy sees it: tier, grant key, skill facts, arguments."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import jsonschema

from broker.arguments import MISSING, normalize
from broker.errors import InvalidCall, SchemaMismatch, ScriptNotFound, ScriptNotSupported
from broker.grants import tool_key
from broker.registry import Tool
from broker.tiers import Tier
from store.errors import SkillNotFound
from store.hashing import grant_key
from store.models import Skill
from store.schemas import schema_for
from store.skills import SkillStore
from store.validation import is_valid_name

SKILL_TOOLS = frozenset(
    {"load_skill", "read_skill_resource", "run_skill_script", "get_skill", "draft_skill",
     "edit_skill"}
)  # fmt: skip
RUN = "run_skill_script"
# What the sandbox runner can run (Python and JavaScript guests).
SANDBOX_SUFFIXES = (".py", ".js", ".mjs")
NEVER_GRANTED = frozenset({"edit_skill"})


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
    network: str = "none"


def plan_call(tool: Tool, arguments: dict[str, Any], store: SkillStore) -> CallPlan:
    """Classify a call; for run_skill_script also read and check its script arguments once."""
    if tool.name == RUN:
        return _plan_run(tool, arguments, store)
    skill = _named_skill(arguments, store) if tool.name in SKILL_TOOLS else None
    key = None if tool.name in NEVER_GRANTED else tool_key(tool.name)
    locked = skill is not None and (skill.locked or skill.read_only or skill.author != "assistant")
    return CallPlan(
        tool=tool,
        tier=str(tool.tier),
        arguments=arguments,
        grant_key=key,
        skill=skill,
        skill_enabled=skill.enabled if skill is not None else True,
        skill_locked=locked,
        target_is_draft=skill is not None and skill.author == "assistant" and not skill.locked,
    )


def _named_skill(arguments: dict[str, Any], store: SkillStore) -> Skill | None:
    name = arguments.get("skill_name", arguments.get("skillName", arguments.get("name")))
    if not isinstance(name, str) or not is_valid_name(name):
        return None
    try:
        return store.get(name)
    except SkillNotFound:
        return None


def _plan_run(tool: Tool, arguments: dict[str, Any], store: SkillStore) -> CallPlan:
    skill = _named_skill(arguments, store)
    if skill is None:
        # A call naming no valid skill is a change with no grant: the broker asks (seed 000).
        return CallPlan(tool=tool, tier=str(Tier.CHANGE), arguments=arguments, grant_key=None)
    script = arguments.get("script")
    if not isinstance(script, str) or not script:
        raise InvalidCall(
            "HOST: 'script' must name one of the skill's scripts, such as 'scripts/x.py'."
        )
    scripts = store.scripts(skill)
    if script not in scripts:
        listed = ", ".join(scripts) or "none"
        raise ScriptNotFound(
            f"HOST: the skill '{skill.name}' has no script '{script}'; it has: {listed}."
        )
    if skill.execution == "sandbox" and PurePosixPath(script).suffix not in SANDBOX_SUFFIXES:
        raise ScriptNotSupported(
            f"HOST: sandboxed skills run .py, .js and .mjs scripts only; '{script}' can't run."
        )
    normalised = normalize(
        arguments.get("arguments"),
        arguments.get("node", MISSING),
        execution=skill.execution,
        skill=skill.name,
        script=script,
    )
    info = store.info(skill)
    validator = _validator(skill.hash, script, schema_for(info, script))
    error = jsonschema.exceptions.best_match(validator.iter_errors(normalised.arguments))
    if error is not None:
        raise SchemaMismatch(f"HOST: arguments don't match {script}'s parameters: {error.message}.")
    node = normalised.arguments.get("node")
    return CallPlan(
        tool=tool,
        tier=skill.tier,
        arguments={"skill_name": skill.name, "script": script, "arguments": normalised.arguments},
        grant_key=grant_key(skill.name, skill.hash),
        skill=skill,
        skill_enabled=skill.enabled,
        script=script,
        # The node says where to run; the rest of the arguments go to the script (seed 000).
        script_arguments={k: v for k, v in normalised.arguments.items() if k != "node"},
        node=node if isinstance(node, str) else None,
        network=_network(info.execution, info.network, info.allowed_domains),
    )


@functools.lru_cache(maxsize=512)
def _validator_for(
    skill_hash: str, script: str, schema_json: str
) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(schema_json))


def _validator(
    skill_hash: str, script: str, schema: dict[str, Any]
) -> jsonschema.Draft202012Validator:
    """A compiled validator of the script's schema, reused while the skill keeps its hash."""
    return _validator_for(skill_hash, script, json.dumps(schema, sort_keys=True))


def _network(execution: str, network: str, domains: tuple[str, ...]) -> str:
    """Spark scripts get the network they ask for; sandbox scripts only with allowed domains."""
    if execution == "spark":
        return network
    if execution == "sandbox" and domains:
        return "bridge"
    return "none"

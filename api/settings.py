"""The owner's settings: which change tools (or skill versions) run without asking, how
run_command runs, and whether skills need a trusted signature."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.orm import Session

from api.auth import actor, owner_only
from api.blueprint import Blueprint
from api.errors import ApiError
from api.roles import owner_route
from api.schemas import SettingsSchema
from api.services import services
from broker.classify import RUN
from broker.errors import UnknownTool
from broker.grantable import owner_may_allow
from broker.grants import HOST, host_key, is_host_key, owner_keys, set_owner_keys, tool_key
from broker.webtools import bare_host
from store import audit
from store.audit import AuditKind
from store.db import transaction
from store.errors import SkillNotFound
from store.hashing import grant_key, shown_key
from store.models import Owner
from store.names import is_valid_name
from store.signatures import set_required

blp = Blueprint("settings", __name__, url_prefix="/api/settings", description="Owner settings")
# The name part is checked by the one name rule (store/names.py), not by this pattern.
SKILL_KEY = re.compile(r"skill:(.{1,64})@([0-9a-f]{8}|[0-9a-f]{64})")


@blp.route("")
@blp.response(200, SettingsSchema)
def get_settings() -> dict[str, Any]:
    """Show the change tools and skill versions that run without asking"""
    caller = owner_only()
    with services().sessions() as session:
        keys = owner_keys(session, caller)
        shell = _shell(session, caller)
        required = _owner(session, caller).require_signature
    return {
        "auto_tools": [shown_key(key).removeprefix("tool:") for key in keys],
        "run_command_shell": shell,
        "require_signature": required,
    }


@blp.route("", methods=["PUT"])
@owner_route
@blp.arguments(SettingsSchema())
@blp.response(200, SettingsSchema)
def put_settings(body: dict[str, Any]) -> dict[str, Any]:
    """Replace the list: change-tier tool names, or skill keys like skill:name@1a2b3c4d"""
    caller = owner_only()
    keys = [_key(caller, entry) for entry in body["auto_tools"]]
    with transaction(services().sessions) as session:
        before, shell_before = set(owner_keys(session, caller)), _shell(session, caller)
        required_before = _owner(session, caller).require_signature
        set_owner_keys(session, caller, keys)
        if body["run_command_shell"] is not None:
            _owner(session, caller).run_command_shell = body["run_command_shell"]
        if body["require_signature"] is not None:
            set_required(session, caller, body["require_signature"])
        shell = _shell(session, caller)
        required = _owner(session, caller).require_signature
        session.flush()  # the changes before the audit's head lock, the commit's last
        if before != set(keys) or shell != shell_before or required != required_before:
            facts: dict[str, audit.Fact] = {
                "added": sorted(shown_key(key) for key in set(keys) - before),
                "removed": sorted(shown_key(key) for key in before - set(keys)),
                "run_command_shell": shell,
                "require_signature": required,
            }
            audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), "settings", facts)
    return {
        "auto_tools": sorted(shown_key(key).removeprefix("tool:") for key in set(keys)),
        "run_command_shell": shell,
        "require_signature": required,
    }


def _owner(session: Session, owner_id: int) -> Owner:
    owner = session.get(Owner, owner_id)
    assert owner is not None  # the caller's token was just checked
    return owner


def _shell(session: Session, owner_id: int) -> bool:
    """Whether run_command runs through /bin/sh for this owner (broker/commands.py)."""
    return _owner(session, owner_id).run_command_shell


def _key(caller: int, entry: str) -> str:
    """The stored key of a setting; a skill key is bound to the full hash it names now."""
    if is_host_key(entry):  # a host read_web_page reads without asking
        host = bare_host(entry.removeprefix(HOST))
        if host is None:
            raise ApiError(422, "invalid_setting", f"'{entry[:300]}' is not a host:<host> key.")
        return host_key(host)
    if entry.startswith("skill:"):
        match = SKILL_KEY.fullmatch(entry)
        if match is None or not is_valid_name(match.group(1)):
            raise ApiError(422, "invalid_setting", f"'{entry}' is not a skill:<name>@<hash8> key.")
        name, prefix = match.groups()
        try:
            skill = services().store.get(caller, name)
        except SkillNotFound:
            raise ApiError(422, "invalid_setting", f"You have no skill named '{name}'.") from None
        if not skill.hash.startswith(prefix):
            raise ApiError(
                422,
                "invalid_setting",
                f"'{entry}' does not name the current version of '{name}' "
                f"(its key is now {shown_key(grant_key(name, skill.hash))}).",
            )
        return grant_key(name, skill.hash)
    try:
        tool = services().broker.registry.get(entry)
    except UnknownTool:
        raise ApiError(422, "invalid_setting", f"There is no tool named '{entry}'.") from None
    if tool.name == RUN:
        raise ApiError(
            422,
            "invalid_setting",
            "run_skill_script takes each skill's tier: allow a skill with skill:<name>@<hash8>.",
        )
    if not owner_may_allow(tool):
        raise ApiError(
            422,
            "invalid_setting",
            f"'{entry}' is a {tool.tier} tool; only change tools can run without asking.",
        )
    return tool_key(tool.name)

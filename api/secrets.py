"""The owner's secrets: names listed, values set and removed, never shown; and the one route
that gives values out, to the node agent running a script that declares them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import marshmallow as ma
from flask import Response, jsonify
from sqlalchemy.orm import Session

from api.auth import actor, owner_only, principal
from api.blueprint import Blueprint
from api.errors import ApiError
from api.roles import owner_route
from api.services import services
from relay import naming
from store import audit, ownersecrets
from store.audit import AuditKind
from store.auditevents import audit_secrets_released
from store.db import transaction
from store.errors import SkillNotFound
from store.limits import KIB, MAX_SECRET_BYTES
from store.models import OwnerSecret, Run, Skill
from store.names import is_valid_name
from store.secrets import Sealer
from store.states import RunStatus
from store.validation import is_secret_name

blp = Blueprint("secrets", __name__, url_prefix="/api/secrets", description="Owner secrets")

NAME_RULE = "A secret's name is an environment variable's: A-Z, 0-9 and _, starting with a letter."


def _value(text: str) -> None:
    if "\0" in text:
        raise ma.ValidationError("A secret can't hold a NUL character.")
    if len(text.encode()) > MAX_SECRET_BYTES:
        raise ma.ValidationError(f"A secret holds at most {MAX_SECRET_BYTES // KIB} KiB.")


class SecretPutSchema(ma.Schema):
    value = ma.fields.String(
        required=True,
        validate=[ma.validate.Length(min=1), _value],
        metadata={
            "description": f"The value, kept encrypted and never shown again; at most "
            f"{MAX_SECRET_BYTES // KIB} KiB as UTF-8",
            "pattern": "^[^\\u0000]*$",
            "maxLength": MAX_SECRET_BYTES,
        },
    )
    skill = ma.fields.String(
        load_default=None,
        metadata={"description": "The skill it belongs to; left out, any allowed skill's"},
    )
    hash = ma.fields.String(
        load_default=None,
        validate=ma.validate.Length(min=8, max=64),
        metadata={
            "description": "With skill: the version you reviewed (its hash or first 8 "
            "characters), which storing allows; 409 skill_changed when it is not current"
        },
    )


class SecretQuerySchema(ma.Schema):
    skill = ma.fields.String(load_default=None, metadata={"description": "The skill's secret"})


class SecretSchema(ma.Schema):
    name = ma.fields.String()
    skill = ma.fields.String(allow_none=True, metadata={"description": "None: the owner's own"})
    created_at = ma.fields.DateTime()
    updated_at = ma.fields.DateTime()
    allowed = ma.fields.Boolean(
        allow_none=True,
        metadata={"description": "A skill's secret: its current version may have it"},
    )


class SkillSecretsSchema(ma.Schema):
    skill = ma.fields.String()
    hash = ma.fields.String(metadata={"description": "The skill's current content hash"})
    declared = ma.fields.List(ma.fields.String(), metadata={"description": "skillfleet.secrets"})
    missing = ma.fields.List(ma.fields.String(), metadata={"description": "Declared, not set"})
    allowed = ma.fields.Boolean(metadata={"description": "This version may have its secrets"})


class SecretListSchema(ma.Schema):
    secrets = ma.fields.List(ma.fields.Nested(SecretSchema))
    skills = ma.fields.List(
        ma.fields.Nested(SkillSecretsSchema),
        metadata={"description": "Every skill of yours that declares secrets"},
    )


class AllowSchema(ma.Schema):
    hash = ma.fields.String(
        required=True,
        validate=ma.validate.Length(min=8, max=64),
        metadata={"description": "The version you allow: its hash, or its first 8 characters"},
    )


class AllowedSchema(ma.Schema):
    skill = ma.fields.String()
    hash = ma.fields.String()
    allowed = ma.fields.Boolean()


class RunSecretsSchema(ma.Schema):
    secrets = ma.fields.Dict(keys=ma.fields.String(), values=ma.fields.String())


@blp.route("")
@owner_route
@blp.response(200, SecretListSchema)
def list_secrets() -> dict[str, Any]:
    """List your secrets by name (never a value) and the skills that declare some"""
    caller = owner_only()
    skills = _declaring(caller)
    with services().sessions() as session:
        rows = ownersecrets.listed(session, caller)
        keys = ownersecrets.allowed_keys(session, caller)
        views = [_skill_view(session, caller, skill, names, keys) for skill, names in skills]
    current = {skill.name: skill.hash for skill, _names in skills}
    return {"secrets": [_secret_view(row, current, keys) for row in rows], "skills": views}


@blp.route("/<secret_name:name>", methods=["PUT"])
@owner_route
@blp.arguments(SecretPutSchema())
@blp.response(200, SecretSchema)
def put_secret(body: dict[str, Any], name: str) -> dict[str, Any]:
    """Set a secret; given for a skill, it also allows that skill's version (`hash`, or the
    current one)"""
    caller = owner_only()
    _check_name(name)
    skill = _skill(caller, body["skill"]) if body["skill"] is not None else None
    if body["hash"] is not None:
        if skill is None:
            raise ApiError(422, "invalid_request", "'hash' names a version of the 'skill' given.")
        _check_version(skill, body["hash"])
    sealer = Sealer(services().settings.keys_dir)
    with transaction(services().sessions) as session:
        row = ownersecrets.put(
            session, sealer, caller, name, body["value"],
            skill.name if skill else None, skill.hash if skill else None,
        )  # fmt: skip
        shown = _secret_view(row, {skill.name: skill.hash} if skill else {}, None)
        session.flush()
        facts = {"change": "set", "skill": skill.name if skill else None,
                 "allowed_hash": skill.hash if skill else None}  # fmt: skip
        _audit(session, caller, f"secret:{name}", facts)
    if skill is not None:
        shown["allowed"] = True
    return shown


@blp.route("/<secret_name:name>", methods=["DELETE"])
@owner_route
@blp.arguments(SecretQuerySchema(), location="query")
@blp.response(204)
def delete_secret(query: dict[str, Any], name: str) -> None:
    """Remove a secret (the skill's, with ?skill=)"""
    caller = owner_only()
    _check_name(name)
    with transaction(services().sessions) as session:
        if not ownersecrets.remove(session, caller, name, query["skill"]):
            raise ApiError(404, "secret_not_found", f"You have no secret named '{name}' there.")
        session.flush()
        _audit(session, caller, f"secret:{name}", {"change": "deleted", "skill": query["skill"]})


@blp.route("/skills/<skill>", methods=["PUT"])
@owner_route
@blp.arguments(AllowSchema())
@blp.response(200, AllowedSchema)
def allow_skill(body: dict[str, Any], skill: str) -> dict[str, Any]:
    """Let this version of a skill (its hash) have the secrets it declares"""
    caller = owner_only()
    found = _skill(caller, skill)
    _check_version(found, body["hash"])
    with transaction(services().sessions) as session:
        ownersecrets.allow(session, caller, found.name, found.hash)
        session.flush()
        _audit(
            session, caller, f"secrets-of:{found.name}", {"change": "allowed", "hash": found.hash}
        )
    return {"skill": found.name, "hash": found.hash, "allowed": True}


@blp.route("/skills/<skill>", methods=["DELETE"])
@owner_route
@blp.response(204)
def disallow_skill(skill: str) -> None:
    """Withdraw a skill's leave to have its secrets (every version)"""
    caller = owner_only()
    found = _skill(caller, skill)
    with transaction(services().sessions) as session:
        ownersecrets.disallow(session, caller, found.name)
        session.flush()
        _audit(session, caller, f"secrets-of:{found.name}", {"change": "disallowed"})


def _audit(session: Session, caller: int, subject: str, facts: Mapping[str, audit.Fact]) -> None:
    """A secret set or removed, or a skill's leave to have its secrets: names and hashes,
    never a value."""
    audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), subject, facts)


# -- the node agent's route (api/nodes.py) ------------------------------------------------


def run_secrets(node: str, run_id: str) -> Response:
    """The declared secrets of a run that `node`'s agent is running now, unsealed.

    Only that node's own token reaches them: to anyone else, the owner included, the run is
    not there (404). The run must be running, on this node's queue, of the skill's current
    version, and that version allowed (store/ownersecrets.py).
    """
    found = principal()
    with services().sessions() as session:
        run = session.get(Run, run_id)
    if found.kind != "node" or run is None or not _runs_on(run, node):
        raise ApiError(404, "run_not_found", f"No run '{run_id}' is running on '{node}'.")
    assert run.owner_id is not None and run.skill_name is not None and run.skill_hash
    try:
        skill = services().store.get(run.owner_id, run.skill_name)
    except SkillNotFound:
        skill = None
    if skill is None or skill.hash != run.skill_hash:
        raise ownersecrets.SecretMissing(
            f"The skill '{run.skill_name}' changed or went away since the run was queued; "
            "its secrets go only to the version the owner allowed."
        )
    names = services().store.info(skill).secrets
    sealer = Sealer(services().settings.keys_dir)
    with transaction(services().sessions) as session:
        values = ownersecrets.for_run(session, sealer, run.owner_id, skill.name, skill.hash, names)
        if values:
            audit_secrets_released(session, run.owner_id, run.id, node, values)
    response = jsonify(RunSecretsSchema().dump({"secrets": values}))
    response.headers["Cache-Control"] = "no-store"
    return response


def _runs_on(run: Run, node: str) -> bool:
    queue = node if node in (naming.SPARK, naming.SANDBOX) else naming.node_queue(node)
    return (
        run.queue == queue
        and run.status == RunStatus.RUNNING
        and run.skill_name is not None
        and run.owner_id is not None
    )


# -- helpers -----------------------------------------------------------------------------


def _check_name(name: str) -> None:
    if not is_secret_name(name):
        shown = name if len(name) <= 64 else name[:61] + "..."
        raise ApiError(422, "invalid_secret_name", f"{NAME_RULE} {shown!r} is not one.")


def _check_version(skill: Skill, given: str) -> None:
    """409 skill_changed unless `given` is the skill's current hash (or its first characters)."""
    if not skill.hash.startswith(given):
        raise ApiError(
            409,
            "skill_changed",
            f"'{skill.name}' is now version {skill.hash[:8]}, not {given[:64]}; review it and "
            "allow that one.",
        )


def _skill(caller: int, name: str) -> Skill:
    """The skill as the owner sees it; 404 when they have none of that name."""
    if not is_valid_name(name):
        raise ApiError(404, "skill_not_found", "You have no skill of that name.")
    return services().store.get(caller, name)


def _declaring(caller: int) -> list[tuple[Skill, tuple[str, ...]]]:
    """The owner's skills (and shared ones) that declare secrets, with their names."""
    store = services().store
    found = []
    for skill in store.installed(caller):
        names = store.info(skill).secrets
        if names:
            found.append((skill, names))
    return found


def _skill_view(
    session: Any, caller: int, skill: Skill, names: tuple[str, ...], keys: set[str]
) -> dict[str, Any]:
    lacking = ownersecrets.lack(session, caller, skill.name, skill.hash, names)
    return {
        "skill": skill.name,
        "hash": skill.hash,
        "declared": list(names),
        "missing": list(lacking.missing),
        "allowed": ownersecrets.grant_key(skill.name, skill.hash) in keys,
    }


def _secret_view(
    row: OwnerSecret, current: dict[str, str], keys: set[str] | None
) -> dict[str, Any]:
    allowed = None
    if row.skill_name and keys is not None:
        skill_hash = current.get(row.skill_name)
        allowed = (
            skill_hash is not None and ownersecrets.grant_key(row.skill_name, skill_hash) in keys
        )
    return {
        "name": row.name,
        "skill": row.skill_name or None,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
        "allowed": allowed,
    }

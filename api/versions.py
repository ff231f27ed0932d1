"""A skill's versions: the list of those it has or had, and a rollback to a kept one."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from api.auth import actor, owner_only, owner_or_agent, principal
from api.blueprint import Blueprint
from api.nodes import broadcast_sync
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import SkillSchema
from api.services import services
from store import versions
from store.models import Skill, SkillVersion
from store.rollback import rollback
from store.tokens import Role

blp = Blueprint(
    "versions", __name__, url_prefix="/api/skills", description="A skill's versions and rollback"
)


class SkillVersionSchema(ma.Schema):
    hash = ma.fields.String(metadata={"description": "The version's full content hash"})
    created_at = ma.fields.DateTime(
        attribute="seen_at", metadata={"description": "When the skill first had it"}
    )
    author = ma.fields.String(
        allow_none=True,
        metadata={
            "description": "Who made it: owner, assistant, operator or builtin (null: recorded "
            "before versions were kept)"
        },
    )
    source = ma.fields.String(
        allow_none=True,
        metadata={"description": "What made it: upload, github, copy, draft, edit, builtin, path"},
    )
    signed_by = ma.fields.String(
        allow_none=True,
        metadata={"description": "The trusted key that signed it; null: unsigned or unchecked"},
    )
    file_count = ma.fields.Integer(allow_none=True)
    size_bytes = ma.fields.Integer(allow_none=True)
    current = ma.fields.Boolean(metadata={"description": "Whether it is the skill's content now"})
    kept = ma.fields.Boolean(
        metadata={"description": "Whether its files are kept, so a rollback can make it current"}
    )
    pinned = ma.fields.Boolean(
        allow_none=True,
        metadata={
            "description": "Whether one of your jobs pins it; null for an agent token, which "
            "reads no jobs"
        },
    )


class RollbackSchema(ma.Schema):
    hash = ma.fields.String(
        required=True,
        validate=ma.validate.Regexp(
            r"^[0-9a-f]{64}\Z", error="'hash' is a full content hash: 64 lowercase hex digits."
        ),
        metadata={"description": "The kept version to make current (GET …/versions lists them)"},
    )


@blp.route("/<name>/versions")
class SkillVersions(MethodView):
    @blp.response(200, SkillVersionSchema(many=True))
    @keyset(blp)
    def get(self, name: str, page: Page) -> list[dict[str, Any]]:
        """List a skill's versions, newest first: hash, when, by whom, source, signer"""
        caller = owner_or_agent()
        skill = services().store.get(caller, name)
        rows = versions.listing(services().sessions, skill)
        pinned = None
        if principal().role == Role.OWNER:  # jobs are the owner's alone (api/jobs.py)
            with services().sessions() as session:
                pinned = versions.pinned_hashes(session, skill.owner_id, skill.name)
        shown = [_shown(row, skill, pinned) for row in rows]
        return memory_page(shown, page, caller, _newest_first, descending=True)


@blp.route("/<name>/rollback", methods=["POST"])
@owner_route
@blp.arguments(RollbackSchema())
@blp.response(200, SkillSchema)
def rollback_skill(body: dict[str, Any], name: str) -> Skill:
    """Make a kept version of your skill current again; its grants hold again"""
    skill = rollback(services().store, owner_only(), name, body["hash"], actor())
    broadcast_sync()
    return skill


def _newest_first(shown: dict[str, Any]) -> tuple[str, str]:
    return (shown["seen_at"].isoformat(), shown["hash"])


def _shown(row: SkillVersion, skill: Skill, pinned: set[str] | None) -> dict[str, Any]:
    return {
        "hash": row.hash,
        "seen_at": row.seen_at,
        "author": row.author,
        "source": row.source,
        "signed_by": row.signed_by,
        "file_count": row.file_count,
        "size_bytes": row.size_bytes,
        "current": row.hash == skill.hash,
        "kept": row.kept,
        "pinned": None if pinned is None else row.hash in pinned,
    }

"""Every tool with its tier, and what the owner's settings and a job's grants can do with it."""

from __future__ import annotations

from typing import Any

import marshmallow as ma

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.services import services
from broker.grantable import job_may_grant, owner_may_allow
from broker.grants import owner_keys, tool_key

blp = Blueprint(
    "tool_settings", __name__, url_prefix="/api/settings/tools", description="Owner settings"
)


class ToolSettingSchema(ma.Schema):
    name = ma.fields.String()
    aliases = ma.fields.List(
        ma.fields.String(), metadata={"description": "Other names it answers to"}
    )
    tier = ma.fields.String(
        metadata={"description": "read, web, registry, change, destructive, secret, draft or "
                  "skill-edit (run_skill_script: change here, each skill's tier when called)"}
    )  # fmt: skip
    description = ma.fields.String()
    owner_may_allow = ma.fields.Boolean(
        metadata={"description": "A change tool: the settings' auto_tools can let it run "
                  "without asking (run_skill_script never: allow its skills instead)"}
    )  # fmt: skip
    runs_without_asking = ma.fields.Boolean(
        metadata={"description": "The owner's settings list it (auto_tools)"}
    )
    job_may_grant = ma.fields.Boolean(
        metadata={"description": "A change or destructive tool a job's grants.tools can name"}
    )


@blp.route("")
@owner_route
@blp.response(200, ToolSettingSchema(many=True))
@keyset(blp)
def list_tool_settings(page: Page) -> list[dict[str, Any]]:
    """List every tool with its tier and whether it runs without asking"""
    caller = owner_only()
    with services().sessions() as session:
        allowed = set(owner_keys(session, caller))
    tools = [
        {
            "name": tool.name,
            "aliases": list(tool.aliases),
            "tier": str(tool.tier),
            "description": tool.description,
            "owner_may_allow": owner_may_allow(tool),
            "runs_without_asking": tool_key(tool.name) in allowed,
            "job_may_grant": job_may_grant(tool),
        }
        for tool in services().broker.registry
        if tool.implemented
    ]
    return memory_page(tools, page, caller)

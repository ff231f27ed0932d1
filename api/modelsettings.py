"""The owner's model: the OpenAI-compatible endpoint agent turns and prompt steps run on."""

from __future__ import annotations

from typing import Any

import marshmallow as ma

from api.auth import actor, owner_only
from api.blueprint import Blueprint
from api.roles import owner_route
from api.schemas import HTTP_URL_PATTERN, NOT_BLANK_PATTERN
from api.services import services
from store import audit, modelsettings
from store.audit import AuditKind
from store.db import transaction
from store.egress import Egress
from store.limits import MAX_API_KEY_CHARS, MAX_BASE_URL_CHARS, MAX_MODEL_NAME_CHARS
from store.secrets import Sealer

blp = Blueprint(
    "model_settings", __name__, url_prefix="/api/settings/model", description="Owner settings"
)


class ModelSettingSchema(ma.Schema):
    """Checked by the store (store/modelsettings.py: 422 `invalid_setting`); the fields say
    what it accepts, but for the URL having a host."""

    base_url = ma.fields.String(
        required=True,
        metadata={
            "description": "The chat-completions base URL, e.g. https://api.openai.com/v1; a "
            "loopback or private address only when the operator allows it "
            "(SKILLFLEET_EGRESS_ALLOW)",
            "pattern": HTTP_URL_PATTERN,
            "maxLength": MAX_BASE_URL_CHARS,
        },
    )
    name = ma.fields.String(
        required=True,
        metadata={
            "description": "The model's name",
            "pattern": NOT_BLANK_PATTERN,
            "maxLength": MAX_MODEL_NAME_CHARS,
        },
    )
    api_key = ma.fields.String(
        load_only=True,
        allow_none=True,
        metadata={
            "description": "Kept encrypted; left out keeps the stored key, null clears it",
            "maxLength": MAX_API_KEY_CHARS,
        },
    )


class ModelSettingShownSchema(ma.Schema):
    base_url = ma.fields.String(allow_none=True)
    name = ma.fields.String(allow_none=True)
    api_key_set = ma.fields.Boolean()


@blp.route("")
@blp.response(200, ModelSettingShownSchema)
def get_model() -> dict[str, Any]:
    """Show the model agent turns run on (never the key, only whether one is kept)"""
    with services().sessions() as session:
        return modelsettings.shown(session, owner_only())


@blp.route("", methods=["PUT"])
@owner_route
@blp.arguments(ModelSettingSchema())
@blp.response(200, ModelSettingShownSchema)
def put_model(body: dict[str, Any]) -> dict[str, Any]:
    """Set the model: an OpenAI-compatible base URL (public, or allowed), its name and key"""
    caller = owner_only()
    settings = services().settings
    modelsettings.check(body["base_url"], body["name"], body.get("api_key"))
    modelsettings.check_address(body["base_url"], Egress(settings.egress_allow))
    sealer = Sealer(settings.keys_dir)
    with transaction(services().sessions) as session:
        modelsettings.save(
            session,
            sealer,
            caller,
            body["base_url"],
            body["name"],
            body.get("api_key"),
            keep_key="api_key" not in body,
        )
        session.flush()
        key = "kept" if "api_key" not in body else ("set" if body["api_key"] else "none")
        facts = {"change": "set", "name": body["name"], "api_key": key}
        audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), "model", facts)
    with services().sessions() as session:
        return modelsettings.shown(session, caller)


@blp.route("", methods=["DELETE"])
@blp.response(204)
def delete_model() -> None:
    """Forget the model and its key; prompt steps then fail with no_model"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        modelsettings.remove(session, caller)
        session.flush()
        facts = {"change": "removed"}
        audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), "model", facts)

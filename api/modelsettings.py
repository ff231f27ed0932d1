"""The owner's model: the OpenAI-compatible endpoint agent turns and prompt steps run on."""

from __future__ import annotations

from typing import Any

import marshmallow as ma

from api.auth import owner_only
from api.blueprint import Blueprint
from api.roles import owner_route
from api.services import services
from store import modelsettings
from store.db import transaction
from store.secrets import Sealer

blp = Blueprint(
    "model_settings", __name__, url_prefix="/api/settings/model", description="Owner settings"
)


class ModelSettingSchema(ma.Schema):
    base_url = ma.fields.String(
        required=True,
        metadata={"description": "The chat-completions base URL, e.g. http://127.0.0.1:8000/v1"},
    )
    name = ma.fields.String(required=True, metadata={"description": "The model's name"})
    api_key = ma.fields.String(
        load_only=True,
        allow_none=True,
        metadata={"description": "Kept encrypted; left out keeps the stored key, null clears it"},
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
    """Set the model: an OpenAI-compatible base URL, the model name and its API key"""
    caller = owner_only()
    sealer = Sealer(services().settings.keys_dir)
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
    with services().sessions() as session:
        return modelsettings.shown(session, caller)


@blp.route("", methods=["DELETE"])
@blp.response(204)
def delete_model() -> None:
    """Forget the model and its key; prompt steps then fail with no_model"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        modelsettings.remove(session, caller)

"""The owner's default model: one of their sources, a model on it, reasoning effort and the
context tier (store/modelsettings.py); agent turns and prompt steps run on it unless a job
names its own."""

from __future__ import annotations

from typing import Any

import marshmallow as ma

from api.auth import actor, owner_only
from api.blueprint import Blueprint
from api.roles import owner_route
from api.schemas import HTTP_URL_PATTERN, NOT_BLANK_PATTERN, context_field, effort_field
from api.services import services
from store import audit, modelsettings
from store.audit import AuditKind
from store.db import transaction
from store.egress import Egress
from store.limits import MAX_API_KEY_CHARS, MAX_BASE_URL_CHARS, MAX_MODEL_NAME_CHARS, MAX_NAME_CHARS
from store.modelchoice import ModelChoice
from store.secrets import Sealer

blp = Blueprint(
    "model_settings", __name__, url_prefix="/api/settings/model", description="Owner settings"
)

FORMS = (
    'Send {"source", "model"} (with "reasoning_effort" and "context" if you like), or the '
    'first form {"base_url", "name", "api_key"}, not a mix of both.'
)


class ModelSettingSchema(ma.Schema):
    """Either form; checked by the store (store/modelsettings.py: 422 `invalid_setting`,
    `unknown_source`, `model_url_refused`)."""

    source = ma.fields.String(
        metadata={"description": "One of your model sources", "maxLength": MAX_NAME_CHARS}
    )
    model = ma.fields.String(
        metadata={
            "description": "A model the source serves",
            "pattern": NOT_BLANK_PATTERN,
            "maxLength": MAX_MODEL_NAME_CHARS,
        },
    )
    reasoning_effort = effort_field()
    context = context_field()
    base_url = ma.fields.String(
        metadata={
            "description": "First form: the chat-completions base URL, e.g. "
            "https://api.openai.com/v1, kept as your source named `default`; a loopback or "
            "private address only when the operator allows it (SKILLFLEET_EGRESS_ALLOW)",
            "pattern": HTTP_URL_PATTERN,
            "maxLength": MAX_BASE_URL_CHARS,
        },
    )
    name = ma.fields.String(
        metadata={
            "description": "First form: the model's name",
            "pattern": NOT_BLANK_PATTERN,
            "maxLength": MAX_MODEL_NAME_CHARS,
        },
    )
    api_key = ma.fields.String(
        load_only=True,
        allow_none=True,
        metadata={
            "description": "First form: kept encrypted; left out keeps the stored key, null "
            "clears it",
            "maxLength": MAX_API_KEY_CHARS,
        },
    )

    @ma.validates_schema
    def one_form(self, data: dict[str, Any], **_kwargs: Any) -> None:
        first = {"base_url", "name", "api_key"} & set(data)
        second = {"source", "model"} & set(data)
        if first and second or not first and not second:
            raise ma.ValidationError(FORMS)
        needed = ("source", "model") if second else ("base_url", "name")
        missing = [field for field in needed if field not in data]
        if missing:
            raise ma.ValidationError(f"'{missing[0]}' is required. {FORMS}")


class ModelSettingShownSchema(ma.Schema):
    source = ma.fields.String(allow_none=True)
    model = ma.fields.String(allow_none=True)
    reasoning_effort = ma.fields.String(allow_none=True)
    context = ma.fields.Raw(allow_none=True, metadata={"description": "A tier or tokens"})
    base_url = ma.fields.String(allow_none=True, metadata={"description": "The source's"})
    name = ma.fields.String(allow_none=True, metadata={"description": "The model (first form)"})
    api_key_set = ma.fields.Boolean(metadata={"description": "The source keeps a key"})


@blp.route("")
@blp.response(200, ModelSettingShownSchema)
def get_model() -> dict[str, Any]:
    """Show the default model (never a key, only whether its source keeps one)"""
    with services().sessions() as session:
        return modelsettings.shown(session, owner_only())


@blp.route("", methods=["PUT"])
@owner_route
@blp.arguments(ModelSettingSchema())
@blp.response(200, ModelSettingShownSchema)
def put_model(body: dict[str, Any]) -> dict[str, Any]:
    """Pick the default model: a source of yours and a model (or the first form: a URL)"""
    caller = owner_only()
    settings = services().settings
    sealer = Sealer(settings.keys_dir)
    if "source" in body:
        choice = ModelChoice(
            body["source"], body["model"], body["reasoning_effort"], body["context"]
        )
        with transaction(services().sessions) as session:
            modelsettings.choose(session, caller, choice)
            session.flush()  # the audit's append is the transaction's last statement
            facts: dict[str, audit.Fact] = {
                "change": "chosen", "source": choice.source, "name": choice.model,
            }  # fmt: skip
            audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), "model", facts)
    else:
        modelsettings.check(body["base_url"], body["name"], body.get("api_key"))
        modelsettings.check_address(body["base_url"], Egress(settings.egress_allow))
        with transaction(services().sessions) as session:
            modelsettings.save(
                session, sealer, caller, body["base_url"], body["name"], body.get("api_key"),
                keep_key="api_key" not in body,
            )  # fmt: skip
            session.flush()
            key = "kept" if "api_key" not in body else ("set" if body["api_key"] else "none")
            facts = {"change": "set", "name": body["name"], "api_key": key}
            audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), "model", facts)
    with services().sessions() as session:
        return modelsettings.shown(session, caller)


@blp.route("", methods=["DELETE"])
@blp.response(204)
def delete_model() -> None:
    """Forget the default model (your sources stay); turns then fail with no_model"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        modelsettings.remove(session, caller)
        session.flush()
        facts = {"change": "removed"}
        audit.append(session, caller, AuditKind.SETTINGS_CHANGED, actor(), "model", facts)

"""The owner's model sources: OpenAI-compatible endpoints their turns may run on, and the
models each lists. All of it is the owner's alone: an agent token gets 403 `owner_only`.
"""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask.views import MethodView

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import HTTP_URL_PATTERN, JsonBoolean
from api.services import services
from broker.modelaccess import LiteLLM, ModelAccess
from store import modelsources
from store.db import transaction
from store.egress import Egress
from store.errors import SkillfleetError
from store.limits import MAX_API_KEY_CHARS, MAX_BASE_URL_CHARS, MAX_NAME_CHARS
from store.modelsources import KINDS, SourceInvalid, SourceSpec
from store.names import NAME
from store.secrets import Sealer

blp = Blueprint(
    "model_sources", __name__, url_prefix="/api/model-sources", description="Model sources"
)


class SourceBodySchema(ma.Schema):
    """Checked by the store (store/modelsources.py: 422 `source_invalid`,
    `source_refused_address`, `virtual_keys_unavailable`)."""

    name = ma.fields.String(
        required=True,
        metadata={"pattern": f"^{NAME.pattern}$", "maxLength": MAX_NAME_CHARS},
    )
    kind = ma.fields.String(
        load_default="openai",
        validate=ma.validate.OneOf(KINDS),
        metadata={"description": "openai: any OpenAI-compatible server; litellm: a LiteLLM proxy"},
    )
    base_url = ma.fields.String(
        load_default=None,
        metadata={
            "description": "The OpenAI-compatible base URL, e.g. https://api.openai.com/v1; a "
            "loopback or private address only when the operator allows it "
            "(SKILLFLEET_EGRESS_ALLOW). Left out for a litellm source with virtual_key: the "
            "operator's LiteLLM",
            "pattern": HTTP_URL_PATTERN,
            "maxLength": MAX_BASE_URL_CHARS,
        },
    )
    api_key = ma.fields.String(
        load_only=True,
        allow_none=True,
        metadata={
            "description": "Kept encrypted, never shown; left out keeps the stored key of a "
            "source replaced, null clears it",
            "maxLength": MAX_API_KEY_CHARS,
        },
    )
    virtual_key = JsonBoolean(
        load_default=False,
        metadata={
            "description": "litellm: mint a virtual key for you with the operator's master key "
            "(and mint again when it is refused)"
        },
    )
    takes_reasoning_effort = JsonBoolean(
        load_default=None,
        allow_none=True,
        metadata={
            "description": "Whether requests carry reasoning_effort; null: by the model's name "
            "(o1, o3, o4, gpt-5, gpt-oss)"
        },
    )


class SourceSchema(ma.Schema):
    name = ma.fields.String()
    kind = ma.fields.String()
    base_url = ma.fields.String()
    api_key_set = ma.fields.Boolean(metadata={"description": "A key is kept (never shown)"})
    virtual_key = ma.fields.Boolean()
    virtual_key_minted = ma.fields.Boolean(
        metadata={"description": "A virtual key has been minted for you and is kept"}
    )
    takes_reasoning_effort = ma.fields.Boolean(allow_none=True)
    created_at = ma.fields.DateTime()
    updated_at = ma.fields.DateTime()


class ErrorPartSchema(ma.Schema):
    code = ma.fields.String(
        metadata={
            "description": "source_unreachable, source_key_refused, source_refused_address, "
            "source_bad_answer, virtual_keys_unavailable or virtual_key_failed"
        }
    )
    message = ma.fields.String()


class ModelListSchema(ma.Schema):
    source = ma.fields.String()
    models = ma.fields.List(ma.fields.String(), metadata={"description": "Model names, sorted"})
    error = ma.fields.Nested(
        ErrorPartSchema,
        allow_none=True,
        metadata={"description": "Why the source can't list its models (models is then [])"},
    )


def _access() -> ModelAccess:
    found = services()
    settings = found.settings
    return ModelAccess(
        found.sessions,
        Sealer(settings.keys_dir),
        Egress(settings.egress_allow),
        LiteLLM.of(settings),
    )


def _spec(body: dict[str, Any], litellm: LiteLLM) -> SourceSpec:
    base_url = body["base_url"]
    if base_url is None and body["virtual_key"]:
        base_url = litellm.default_url()
    if base_url is None:
        raise SourceInvalid("'base_url' is required (but for a litellm source with virtual_key).")
    return SourceSpec(
        name=body["name"],
        base_url=base_url,
        kind=body["kind"],
        api_key=body.get("api_key"),
        keep_key="api_key" not in body,
        virtual_key=body["virtual_key"],
        takes_reasoning_effort=body["takes_reasoning_effort"],
    )


@blp.route("")
class SourceList(MethodView):
    @owner_route
    @blp.response(200, SourceSchema(many=True))
    @keyset(blp)
    def get(self, page: Page) -> list[dict[str, object]]:
        """List your model sources, by name (never a key)"""
        caller = owner_only()
        with services().sessions() as session:
            rows = modelsources.listed(session, caller)
            by_name = memory_page(rows, page, caller, lambda s: (s.name, s.id))
            return [modelsources.shown(row) for row in by_name]

    @owner_route
    @blp.arguments(SourceBodySchema())
    @blp.response(201, SourceSchema)
    def post(self, body: dict[str, Any]) -> dict[str, object]:
        """Add a model source, or replace yours of that name (its key kept if none is sent)"""
        caller = owner_only()
        access = _access()
        spec = _spec(body, access.litellm)
        modelsources.check(spec)
        modelsources.check_address(spec.base_url, access.egress)
        if spec.virtual_key:
            access.litellm.check_serves(spec.base_url)
        with transaction(services().sessions) as session:
            modelsources.save(session, access.sealer, caller, spec)
        with services().sessions() as session:
            return modelsources.shown(modelsources.get(session, caller, spec.name))


@blp.route("/<name>")
class SourceItem(MethodView):
    @owner_route
    @blp.response(200, SourceSchema)
    def get(self, name: str) -> dict[str, object]:
        """Show one of your model sources (never its key)"""
        with services().sessions() as session:
            return modelsources.shown(modelsources.get(session, owner_only(), name))

    @owner_route
    @blp.response(204)
    def delete(self, name: str) -> None:
        """Delete a model source and its keys; refused while your default or a job uses it"""
        caller = owner_only()
        with transaction(services().sessions) as session:
            modelsources.remove(session, caller, name)


@blp.route("/<name>/models")
@owner_route
@blp.response(200, ModelListSchema)
def list_models(name: str) -> dict[str, object]:
    """The models the source lists, or why it can't (an error part, never a hang)"""
    caller = owner_only()
    access = _access()
    with services().sessions() as session:
        modelsources.get(session, caller, name)  # 404 for a source you don't have
    try:
        models = access.models(caller, name)
    except SkillfleetError as e:
        if e.status == 404:
            raise
        return {"source": name, "models": [], "error": {"code": e.code, "message": e.message}}
    return {"source": name, "models": models, "error": None}

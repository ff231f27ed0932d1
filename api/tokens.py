"""The owner's API tokens: create (shown once), list without secrets, delete (refused at once)."""

from __future__ import annotations

from typing import Any

import redis
import structlog
from flask.views import MethodView

from api.auth import actor, bump_token_generation, owner_only, principal
from api.blueprint import Blueprint
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import NewTokenSchema, TokenCreateSchema, TokenSchema
from api.services import services
from store.auditevents import audit_token
from store.db import transaction
from store.models import ApiToken
from store.tokens import issue_token, owner_tokens, revoke_token

log = structlog.get_logger(__name__)

blp = Blueprint("tokens", __name__, url_prefix="/api/tokens", description="API tokens")


@blp.route("")
class Tokens(MethodView):
    @owner_route
    @blp.response(200, TokenSchema(many=True))
    @keyset(blp)
    def get(self, page: Page) -> list[dict[str, Any]]:
        """List your owner and agent tokens, oldest first (never the tokens themselves)"""
        caller = owner_only()
        with services().sessions() as session:
            tokens = owner_tokens(session, caller)
        shown = memory_page(tokens, page, caller, lambda t: (t.id,))
        return [_listed(token, principal().token_id) for token in shown]

    @owner_route
    @blp.arguments(TokenCreateSchema())
    @blp.response(201, NewTokenSchema)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Create a token: role `agent` for an agent's tool calls, `owner` for everything"""
        caller = owner_only()
        with transaction(services().sessions) as session:
            row, token = issue_token(session, caller, body["role"], body["label"])
            session.flush()
            audit_token(session, caller, actor(), row.id, "created", row.role)
        return {"id": row.id, "token": token, "role": row.role, "label": row.label}


def _listed(token: ApiToken, in_use: int | None) -> dict[str, Any]:
    """A token as listed, saying whether it is the one the request came with."""
    listed = {key: getattr(token, key) for key in TokenSchema().fields if key != "in_use"}
    return {**listed, "in_use": token.id == in_use}


@blp.route("/<int:token_id>", methods=["DELETE"])
@blp.response(204)
def delete_token(token_id: int) -> None:
    """Delete a token; every API process refuses it from the next request on"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        revoke_token(session, caller, token_id)
        session.flush()
        audit_token(session, caller, actor(), token_id, "deleted")
        # Before the commit: when Redis can't be told, the request fails and nothing changes.
        bump_token_generation()
    try:
        # And after it, for a process that read the token again in between.
        bump_token_generation()
    except redis.RedisError as e:
        log.warning("could not announce a deleted token a second time", error=str(e))

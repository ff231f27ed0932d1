"""Webhooks: URLs that get the owner's events, each delivery signed (HMAC-SHA256)."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import Response

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import HTTP_URL_PATTERN
from api.services import services
from relay.events import WEBHOOK_KINDS, start_listening
from store import notifications
from store.db import transaction
from store.egress import Egress
from store.limits import MAX_URL_CHARS
from store.models import Webhook
from store.secrets import Sealer

blp = Blueprint("webhooks", __name__, url_prefix="/api/webhooks", description="Webhooks")


class WebhookSchema(ma.Schema):
    """Checked by the store (store/notifications.py: 422 `notification_invalid`,
    `webhook_url_refused`); the fields say what it accepts, but for the host being public."""

    id = ma.fields.String(dump_only=True)
    url = ma.fields.String(
        required=True,
        metadata={
            "description": "An http(s) URL of a public host; other addresses are refused",
            "pattern": HTTP_URL_PATTERN,
            "maxLength": MAX_URL_CHARS,
        },
    )
    events = ma.fields.List(
        ma.fields.String(metadata={"enum": [*WEBHOOK_KINDS, "*"]}),
        required=True,
        metadata={"description": "Event kinds to deliver, or ['*'] for all", "minItems": 1},
    )
    created_at = ma.fields.DateTime(dump_only=True)


class NewWebhookSchema(WebhookSchema):
    secret = ma.fields.String(
        dump_only=True, metadata={"description": "The signing secret; shown only now"}
    )


@blp.route("")
@owner_route
@blp.response(200, WebhookSchema(many=True))
@keyset(blp)
def list_webhooks(page: Page) -> list[Webhook]:
    """List the owner's webhooks, oldest first (never their secrets)"""
    caller = owner_only()
    with services().sessions() as session:
        hooks = notifications.webhooks(session, caller)
    return memory_page(hooks, page, caller, lambda w: (w.created_at, w.id))


@blp.route("", methods=["POST"])
@owner_route
@blp.arguments(WebhookSchema())
@blp.response(201, NewWebhookSchema)
def add_webhook(body: dict[str, Any]) -> dict[str, Any]:
    """Add a webhook (public hosts only); its signing secret is shown once"""
    caller = owner_only()
    settings = services().settings
    notifications.check_webhook_url(body["url"], Egress(settings.egress_allow))
    sealer = Sealer(settings.keys_dir)
    with transaction(services().sessions) as session:
        first = not notifications.is_listening(session, caller)
        hook, secret = notifications.add_webhook(
            session, sealer, caller, body["url"], body["events"], WEBHOOK_KINDS
        )
        shown = {
            "id": hook.id,
            "url": hook.url,
            "events": hook.events,
            "created_at": hook.created_at,
            "secret": secret,
        }
    if first:
        start_listening(services().redis, caller)
    return shown


@blp.route("/<webhook_id>", methods=["DELETE"])
@blp.response(204)
def remove_webhook(webhook_id: str) -> Response:
    """Remove a webhook; deliveries still waiting for a retry are dropped"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        notifications.remove_webhook(session, caller, webhook_id)
    return Response(status=204)

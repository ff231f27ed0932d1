"""Web Push: the VAPID public key and the owner's browser subscriptions."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import Response

from api.auth import owner_only
from api.blueprint import Blueprint
from api.paging import Page, keyset, memory_page
from api.roles import owner_route
from api.schemas import HTTPS_URL_PATTERN
from api.services import services
from relay import push
from relay.events import start_listening
from store import notifications
from store.db import transaction
from store.egress import Egress, EgressRefused
from store.limits import MAX_URL_CHARS
from store.models import PushSubscription

blp = Blueprint("push", __name__, url_prefix="/api/push", description="Web Push notifications")


class PushKeySchema(ma.Schema):
    public_key = ma.fields.String(
        metadata={"description": "The VAPID applicationServerKey (base64url)"}
    )


class SubscriptionKeysSchema(ma.Schema):
    p256dh = ma.fields.String(required=True)
    auth = ma.fields.String(required=True)


class SubscriptionSchema(ma.Schema):
    id = ma.fields.String(dump_only=True)
    endpoint = ma.fields.String(
        required=True,
        validate=ma.validate.Length(min=1, max=MAX_URL_CHARS),
        metadata={
            "description": "The push service's https URL; only allowed push services' are kept",
            "pattern": HTTPS_URL_PATTERN,
        },
    )
    keys = ma.fields.Nested(SubscriptionKeysSchema, required=True, load_only=True)
    created_at = ma.fields.DateTime(dump_only=True)


class EndpointSchema(ma.Schema):
    endpoint = ma.fields.String(required=True)


@blp.route("/key")
@blp.response(200, PushKeySchema)
def push_key() -> dict[str, str]:
    """The VAPID public key a browser subscribes with"""
    owner_only()
    vapid = push.load_or_create_vapid(services().settings.keys_dir)
    return {"public_key": push.application_server_key(vapid)}


@blp.route("/subscriptions")
@owner_route
@blp.response(200, SubscriptionSchema(many=True))
@keyset(blp)
def list_subscriptions(page: Page) -> list[PushSubscription]:
    """List the owner's push subscriptions, oldest first"""
    caller = owner_only()
    with services().sessions() as session:
        found = notifications.subscriptions(session, caller)
    return memory_page(found, page, caller, lambda s: (s.created_at, s.id))


@blp.route("/subscriptions", methods=["POST"])
@owner_route
@blp.arguments(SubscriptionSchema())
@blp.response(201, SubscriptionSchema)
def subscribe(body: dict[str, Any]) -> Any:
    """Keep a browser's subscription (at most 20; only endpoints of allowed push services)"""
    caller = owner_only()
    endpoint = body["endpoint"]
    settings = services().settings
    egress = Egress(settings.egress_allow)
    if not push.endpoint_allowed(endpoint, settings.push_services, egress):
        raise notifications.EndpointNotAllowed(
            "The endpoint is not an https URL on port 443 of an allowed push service "
            "(SKILLFLEET_PUSH_SERVICES)."
        )
    try:  # push services are public by the list; their names are resolved at each delivery
        egress.check_url(endpoint, lookup=False)
    except EgressRefused as e:
        raise notifications.EndpointNotAllowed(f"The endpoint is refused: {e.message}") from e
    keys = body["keys"]
    with transaction(services().sessions) as session:
        first = not notifications.is_listening(session, caller)
        new = notifications.subscribe(session, caller, endpoint, keys["p256dh"], keys["auth"])
    if first:
        start_listening(services().redis, caller)
    with services().sessions() as session:
        found = [s for s in notifications.subscriptions(session, caller) if s.endpoint == endpoint]
    return found[0], 201 if new else 200


@blp.route("/subscriptions", methods=["DELETE"])
@owner_route
@blp.arguments(EndpointSchema())
@blp.response(204)
def unsubscribe(body: dict[str, Any]) -> Response:
    """Forget a browser's subscription"""
    caller = owner_only()
    with transaction(services().sessions) as session:
        notifications.unsubscribe(session, caller, body["endpoint"])
    return Response(status=204)

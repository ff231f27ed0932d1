"""Where an owner's notifications go: Web Push subscriptions and webhooks."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Collection
from urllib.parse import urlsplit

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from store.egress import Egress, EgressRefused
from store.errors import StoreError
from store.limits import MAX_PUSH_KEY_CHARS, MAX_PUSH_SUBSCRIPTIONS, MAX_URL_CHARS, MAX_WEBHOOKS
from store.models import PushSubscription, Webhook, utcnow
from store.secrets import Sealer


class NotificationError(StoreError):
    """Root of refusals of push subscriptions and webhooks."""

    code = "notification_invalid"
    status = 422


class EndpointNotAllowed(NotificationError):
    """Raised when a push endpoint is not on the allow-list of push services."""

    code = "endpoint_not_allowed"
    status = 422


class WebhookUrlRefused(NotificationError):
    """Raised when a webhook's host is, or resolves to, an address requests may not reach."""

    code = "webhook_url_refused"
    status = 422


class TooMany(NotificationError):
    """Raised when an owner already has the most subscriptions or webhooks allowed."""

    code = "too_many"
    status = 409


class NotFound(NotificationError):
    """Raised when the owner has no such subscription or webhook."""

    code = "not_found"
    status = 404


def subscribe(session: Session, owner_id: int, endpoint: str, p256dh: str, auth: str) -> bool:
    """Keep a subscription (the same endpoint again replaces its keys); True when new."""
    if not (0 < len(p256dh) <= MAX_PUSH_KEY_CHARS and 0 < len(auth) <= MAX_PUSH_KEY_CHARS):
        raise NotificationError("'keys.p256dh' and 'keys.auth' must be the browser's keys.")
    found = session.scalar(
        select(PushSubscription).where(
            PushSubscription.owner_id == owner_id, PushSubscription.endpoint == endpoint
        )
    )
    if found is not None:
        found.p256dh, found.auth = p256dh, auth
        return False
    count = session.scalar(
        select(func.count())
        .select_from(PushSubscription)
        .where(PushSubscription.owner_id == owner_id)
    )
    if (count or 0) >= MAX_PUSH_SUBSCRIPTIONS:
        raise TooMany(
            f"You already have {MAX_PUSH_SUBSCRIPTIONS} push subscriptions, the most allowed; "
            "remove one first."
        )
    session.add(
        PushSubscription(
            id=str(uuid.uuid4()),
            owner_id=owner_id,
            endpoint=endpoint,
            p256dh=p256dh,
            auth=auth,
            created_at=utcnow(),
        )  # fmt: skip
    )
    return True


def unsubscribe(session: Session, owner_id: int, endpoint: str) -> None:
    result = session.execute(
        delete(PushSubscription).where(
            PushSubscription.owner_id == owner_id, PushSubscription.endpoint == endpoint
        )
    )
    if int(result.rowcount) == 0:  # type: ignore[attr-defined]
        raise NotFound("You have no push subscription with that endpoint.")


def drop_subscription(session: Session, subscription_id: str) -> None:
    """Forget a subscription its push service called gone (404/410)."""
    session.execute(delete(PushSubscription).where(PushSubscription.id == subscription_id))


def subscriptions(session: Session, owner_id: int) -> list[PushSubscription]:
    query = select(PushSubscription).where(PushSubscription.owner_id == owner_id)
    return list(session.scalars(query.order_by(PushSubscription.created_at, PushSubscription.id)))


def check_webhook_url(url: str, egress: Egress) -> None:
    """Refuse a webhook URL that is malformed or whose host may not be reached now.

    It resolves the host (a DNS lookup): call it before the transaction that adds the webhook.
    Each delivery checks the host again (workers/webhooks.py).
    """
    _check_url_form(url)
    try:
        egress.check_url(url)
    except EgressRefused as e:
        raise WebhookUrlRefused(f"The webhook URL is refused: {e.message}") from e


def add_webhook(
    session: Session, sealer: Sealer, owner_id: int, url: str, events: list[str],
    known: Collection[str],
) -> tuple[Webhook, str]:  # fmt: skip
    """A new webhook and its signing secret (shown once, kept encrypted); `url` passed
    check_webhook_url."""
    _check_url_form(url)
    unknown = sorted(set(events) - set(known) - {"*"})
    if not events or unknown:
        raise NotificationError(
            f"'events' must list event kinds ({', '.join(sorted(known))}) or '*'"
            + (f"; unknown: {', '.join(unknown)}." if unknown else ".")
        )
    count = session.scalar(
        select(func.count()).select_from(Webhook).where(Webhook.owner_id == owner_id)
    )
    if (count or 0) >= MAX_WEBHOOKS:
        raise TooMany(f"You already have {MAX_WEBHOOKS} webhooks, the most allowed.")
    secret = "whsec_" + secrets.token_urlsafe(32)
    hook = Webhook(
        id=str(uuid.uuid4()), owner_id=owner_id, url=url, events=sorted(set(events)),
        secret=sealer.seal(secret), created_at=utcnow(),
    )  # fmt: skip
    session.add(hook)
    return hook, secret


def _check_url_form(url: str) -> None:
    try:
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:  # brackets that hold no IPv6 address
        usable = False
    if len(url) > MAX_URL_CHARS or not usable:
        raise NotificationError("'url' must be an http(s) URL of at most 1000 characters.")


def remove_webhook(session: Session, owner_id: int, webhook_id: str) -> None:
    result = session.execute(
        delete(Webhook).where(Webhook.owner_id == owner_id, Webhook.id == webhook_id)
    )
    if int(result.rowcount) == 0:  # type: ignore[attr-defined]
        raise NotFound(f"You have no webhook '{webhook_id}'.")


def webhooks(session: Session, owner_id: int) -> list[Webhook]:
    query = select(Webhook).where(Webhook.owner_id == owner_id)
    return list(session.scalars(query.order_by(Webhook.created_at, Webhook.id)))


def is_listening(session: Session, owner_id: int) -> bool:
    """Whether the owner has a subscription or a webhook."""
    pushed = select(PushSubscription.id).where(PushSubscription.owner_id == owner_id).limit(1)
    hooked = select(Webhook.id).where(Webhook.owner_id == owner_id).limit(1)
    return session.scalar(pushed) is not None or session.scalar(hooked) is not None


def listening_owners(session: Session) -> list[int]:
    """Owners with at least one subscription or webhook."""
    pushed = select(PushSubscription.owner_id)
    hooked = select(Webhook.owner_id)
    return sorted(set(session.scalars(pushed.union(hooked))))

"""Webhook deliveries: a JSON body signed with HMAC-SHA256 over a timestamp and the body.

Each delivery resolves the webhook's host again and goes only to an address that is allowed
(store/egress.py): a name that resolved to a public address when the webhook was added may not
be pointed at a private one later. A delivery is over within WEBHOOK_SECONDS, however slowly
the receiver answers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import structlog

from store.deadlines import Deadline
from store.egress import Egress, EgressRefused
from store.limits import WEBHOOK_SECONDS

log = structlog.get_logger(__name__)

SIGNATURE_HEADER = "Skillfleet-Signature"
EVENT_HEADER = "Skillfleet-Event"
DELIVERY_HEADER = "Skillfleet-Delivery"
# Seconds before each retry of a failed delivery; after the last one it is given up.
BACKOFF_SECONDS = (10, 60, 300, 1800, 7200)


def body_of(event_id: str, kind: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"id": event_id, "kind": kind, "data": data}, sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`, checked by receivers."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def deliver(
    egress: Egress, url: str, secret: str, event_id: str, kind: str, data: dict[str, Any],
    seconds: float = WEBHOOK_SECONDS,
) -> bool:  # fmt: skip
    """POST one event, over within `seconds`; True when the receiver answered 2xx."""
    body = body_of(event_id, kind, data)
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature(secret, int(time.time()), body),
        EVENT_HEADER: kind,
        DELIVERY_HEADER: event_id,
        "User-Agent": "skillfleet-webhooks",
    }
    try:
        with egress.client(Deadline.after(seconds), follow_redirects=False) as client:
            response = client.post(url, content=body, headers=headers)
    except EgressRefused as e:
        log.warning("webhook address refused", event_id=event_id, reason=e.message)
        return False
    except httpx.HTTPError as e:
        log.info("webhook not delivered", event_id=event_id, error_type=type(e).__name__)
        return False
    if not response.is_success:
        log.info("webhook refused", event_id=event_id, status=response.status_code)
    return response.is_success


def retry_delay(attempt: int) -> int | None:
    """Seconds to wait before attempt `attempt + 1`, or None when it is given up."""
    if attempt > len(BACKOFF_SECONDS):
        return None
    return BACKOFF_SECONDS[attempt - 1]

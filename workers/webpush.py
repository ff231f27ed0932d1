"""Sending Web Push messages (RFC 8030, 8291, 8292): aes128gcm, TTL 1 day.

pywebpush encrypts the message and py_vapid signs the VAPID header; the message goes out through
an egress client (store/egress.py), so it reaches only an address the push service's host
resolved to and that was checked, as webhooks do, and is over within PUSH_SECONDS.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog
from py_vapid import Vapid

from store.deadlines import Deadline
from store.egress import Egress, EgressRefused
from store.limits import PUSH_SECONDS

log = structlog.get_logger(__name__)

TTL_SECONDS = 86400
CONTENT_ENCODING = "aes128gcm"
# How long the VAPID signature holds (RFC 8292 allows at most a day).
VAPID_SECONDS = 12 * 3600
# A push service answering one of these says the subscription is gone for good.
GONE = (404, 410)


@dataclass(frozen=True)
class Target:
    endpoint: str
    p256dh: str
    auth: str


def send(
    target: Target, payload: dict[str, Any], vapid: Vapid, contact: str, egress: Egress
) -> int:
    """Encrypt and send one message; the push service's HTTP status (0 when unreachable)."""
    # Imported here: only a worker that sends a push needs it (it brings aiohttp and requests).
    from pywebpush import WebPusher, WebPushException

    subscription = {
        "endpoint": target.endpoint,
        "keys": {"p256dh": target.p256dh, "auth": target.auth},
    }
    try:
        encrypted = WebPusher(subscription).encode(json.dumps(payload).encode(), CONTENT_ENCODING)
    except (WebPushException, ValueError, TypeError) as e:  # keys the browser sent are unusable
        log.info("push not encrypted", error_type=type(e).__name__)
        return 0
    parts = urlsplit(target.endpoint)
    claims = {
        "sub": contact,
        "aud": f"{parts.scheme}://{parts.netloc}",
        "exp": int(time.time()) + VAPID_SECONDS,
    }
    headers = {
        **vapid.sign(claims),
        "Content-Encoding": CONTENT_ENCODING,
        "TTL": str(TTL_SECONDS),
    }
    try:
        with egress.client(Deadline.after(PUSH_SECONDS)) as client:
            response = client.post(target.endpoint, content=encrypted["body"], headers=headers)
    except EgressRefused as e:
        log.warning("push address refused", reason=e.message)
        return 0
    except httpx.HTTPError as e:
        log.info("push not delivered", error_type=type(e).__name__)
        return 0
    if not response.is_success:
        log.info("push not delivered", status=response.status_code)
    return response.status_code

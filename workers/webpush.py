"""Sending Web Push messages (RFC 8030, 8291, 8292) with pywebpush: aes128gcm, TTL 1 day."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import structlog
from py_vapid import Vapid
from pywebpush import WebPushException, webpush

log = structlog.get_logger(__name__)

TTL_SECONDS = 86400
SEND_TIMEOUT_SECONDS = 10
# A push service answering one of these says the subscription is gone for good.
GONE = (404, 410)


@dataclass(frozen=True)
class Target:
    endpoint: str
    p256dh: str
    auth: str


def send(target: Target, payload: dict[str, Any], vapid: Vapid, contact: str) -> int:
    """Encrypt and send one message; the push service's HTTP status (0 when unreachable)."""
    subscription = {
        "endpoint": target.endpoint,
        "keys": {"p256dh": target.p256dh, "auth": target.auth},
    }
    try:
        response: Any = webpush(
            subscription,
            data=json.dumps(payload),
            vapid_private_key=vapid,
            vapid_claims={"sub": contact},
            content_encoding="aes128gcm",
            ttl=TTL_SECONDS,
            timeout=SEND_TIMEOUT_SECONDS,
        )
    except WebPushException as e:
        status = int(e.response.status_code) if e.response is not None else 0
        log.info("push not delivered", status=status)
        return status
    except (ValueError, TypeError) as e:  # keys the browser sent that can't be used
        log.info("push not encrypted", error_type=type(e).__name__)
        return 0
    return int(response.status_code)

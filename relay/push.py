"""Web Push (RFC 8030, 8291, 8292) with pywebpush: a VAPID key made once, aes128gcm, TTL 1 day."""

from __future__ import annotations

import base64
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid
from pywebpush import WebPushException, webpush

from store.secrets import write_once

log = structlog.get_logger(__name__)

VAPID_FILE = "vapid.pem"
TTL_SECONDS = 86400
SEND_TIMEOUT_SECONDS = 10
# A push service answering one of these says the subscription is gone for good.
GONE = (404, 410)


def load_or_create_vapid(keys_dir: Path) -> Vapid:
    """The VAPID key pair in `keys_dir` (PEM, 0600), created on first use."""
    keys_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = keys_dir / VAPID_FILE
    if not path.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        write_once(path, pem)
    return Vapid.from_pem(path.read_bytes())


def application_server_key(vapid: Vapid) -> str:
    """The public key a browser passes to `pushManager.subscribe` (base64url, unpadded)."""
    raw = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def endpoint_allowed(endpoint: str, services: tuple[str, ...]) -> bool:
    """Whether `endpoint` is an https URL of an allowed push service (loopback may be http)."""
    parts = urlsplit(endpoint)
    host = (parts.hostname or "").lower()
    if not host or not any(_matches(host, allowed) for allowed in services):
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and _loopback(host))


def _matches(host: str, allowed: str) -> bool:
    if allowed.startswith("*."):
        return host.endswith(allowed[1:])
    return host == allowed


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


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

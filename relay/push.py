"""Web Push subscriptions: the server's VAPID key (made once), its public key for browsers, and
the push services an endpoint may belong to. Sending is workers/webpush.py."""

from __future__ import annotations

import base64
import ipaddress
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid

from store.secrets import write_once

VAPID_FILE = "vapid.pem"


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

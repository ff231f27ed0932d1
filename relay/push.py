"""Web Push subscriptions: the server's VAPID key (made once), its public key for browsers, and
the push services an endpoint may belong to. Sending is workers/webpush.py."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid

from store.egress import Egress
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


def endpoint_allowed(endpoint: str, services: tuple[str, ...], egress: Egress) -> bool:
    """Whether `endpoint` is an https URL on port 443 of an allowed push service.

    A host the operator lets requests reach (SKILLFLEET_EGRESS_ALLOW, `egress`) may also use
    http and any port: that is how a push service on loopback receives pushes in tests.
    """
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError:  # a bad port or IPv6 address
        return False
    host = (parts.hostname or "").lower()
    if not host or not any(_matches(host, allowed) for allowed in services):
        return False
    if egress.allows_host(host):
        return parts.scheme in ("http", "https")
    return parts.scheme == "https" and port in (None, 443)


def _matches(host: str, allowed: str) -> bool:
    if allowed.startswith("*."):
        return host.endswith(allowed[1:])
    return host == allowed

"""Ed25519 signatures over node manifests: the API signs, node agents verify."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from store.errors import ConfigError, ManifestInvalid

KEY_FILE = "manifest.key"
_KEYS_DIR_MODE = 0o700
_KEY_FILE_MODE = 0o600
_PUBLIC_KEY_BYTES = 32
_SIGNATURE_BYTES = 64


def load_or_create_key(keys_dir: Path) -> Ed25519PrivateKey:
    """The manifest signing key in `keys_dir`, created (0600, in a 0700 folder) on first use."""
    keys_dir.mkdir(parents=True, exist_ok=True, mode=_KEYS_DIR_MODE)
    keys_dir.chmod(_KEYS_DIR_MODE)
    path = keys_dir / KEY_FILE
    if not path.exists():
        _create_key_file(path)
    return _read_key(path)


def _create_key_file(path: Path) -> None:
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _KEY_FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(pem)
            handle.flush()
            os.fsync(handle.fileno())
        # A hard link creates the key only if no other process made one first.
        os.link(temp, path)
    except FileExistsError:
        pass  # another process won the race; its key is the key
    finally:
        temp.unlink(missing_ok=True)


def _read_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"The manifest key {path} is not a readable PEM private key.") from e
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"The manifest key {path} is not an Ed25519 key.")
    return key


def public_key_text(key: Ed25519PrivateKey) -> str:
    """The raw 32-byte public key in base64: what `SKILLFLEET_MANIFEST_KEY` holds on a node."""
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode("ascii")


def canonical_bytes(manifest: dict[str, Any]) -> bytes:
    """The bytes a signature covers: sorted keys, no spaces."""
    return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()


def manifest_tag(key: Ed25519PrivateKey, manifest: dict[str, Any]) -> str:
    """The manifest's entity tag: the same while its node and packages are, and the signing key;
    its `issued_at` left out, so a node holding the manifest is answered "not modified"."""
    listed = {name: value for name, value in manifest.items() if name != "issued_at"}
    digest = hashlib.sha256(canonical_bytes(listed))
    digest.update(key.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    ))  # fmt: skip
    return digest.hexdigest()[:32]


def sign_manifest(key: Ed25519PrivateKey, manifest: dict[str, Any]) -> dict[str, Any]:
    signature = key.sign(canonical_bytes(manifest))
    return {"manifest": manifest, "signature": base64.b64encode(signature).decode("ascii")}


def verify_manifest(public_key: str, signed: object) -> dict[str, Any]:
    """The manifest inside `signed` once its signature verifies with `public_key`."""
    if not isinstance(signed, dict):
        raise ManifestInvalid("The signed manifest is not a JSON object.")
    manifest = signed.get("manifest")
    signature = signed.get("signature")
    if not isinstance(manifest, dict) or not isinstance(signature, str):
        raise ManifestInvalid("The signed manifest needs a 'manifest' object and a 'signature'.")
    verifier = _public_key(public_key)
    raw_signature = _b64(signature, "signature")
    if len(raw_signature) != _SIGNATURE_BYTES:
        raise ManifestInvalid("The manifest signature is not an Ed25519 signature.")
    try:
        verifier.verify(raw_signature, canonical_bytes(manifest))
    except InvalidSignature as e:
        raise ManifestInvalid(
            "The manifest signature does not verify: it was changed or signed by another key."
        ) from e
    return manifest


def _public_key(text: str) -> Ed25519PublicKey:
    raw = _b64(text, "public key")
    if len(raw) != _PUBLIC_KEY_BYTES:
        raise ManifestInvalid("The configured public key is not a 32-byte Ed25519 key.")
    return Ed25519PublicKey.from_public_bytes(raw)


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ManifestInvalid(f"The {what} is not valid base64.") from e

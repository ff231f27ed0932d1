"""Real SSH keys and signatures for tests, made by ssh-keygen as an author would make them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from store.hashing import SIGNATURE_FILE, content_hash


def make_key(folder: Path, name: str, kind: str = "ed25519", bits: int | None = None) -> Path:
    """A new private key without a passphrase at `folder/name` (its public key beside it)."""
    path = folder / name
    size = ["-b", str(bits)] if bits else []
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, *size, "-N", "", "-C", f"{name}@example.org",
         "-f", str(path)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return path


def public_line(key: Path) -> str:
    return key.with_name(key.name + ".pub").read_text().strip()


def fingerprint(key: Path) -> str:
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-f", str(key.with_name(key.name + ".pub"))],
        check=True,
        capture_output=True,
        text=True,
    )
    return listed.stdout.split()[1]


def ssh_sign(key: Path, message: bytes, namespace: str = "skillfleet") -> bytes:
    """`ssh-keygen -Y sign` over `message`, as `skillfleet skills sign` or an author by hand."""
    done = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", namespace, "-f", str(key)],
        input=message,
        check=True,
        capture_output=True,
    )
    return done.stdout


def sign_folder(folder: Path, key: Path, namespace: str = "skillfleet") -> bytes:
    """Write `skillfleet.sig` over the folder's content hash; the signature's bytes."""
    signature = ssh_sign(key, content_hash(folder).encode(), namespace)
    (folder / SIGNATURE_FILE).write_bytes(signature)
    return signature

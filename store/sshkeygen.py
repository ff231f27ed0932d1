"""The one place skillfleet runs OpenSSH's ssh-keygen, which does all the arithmetic of skill
signatures: it reads public keys, makes and verifies SSH signatures (the SSHSIG format git signs
commits with) in the `skillfleet` namespace. Nothing here parses or checks a signature itself.

(store/signing.py is another matter: the API's Ed25519 signature over node manifests.)
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from store.errors import KeyInvalid, SignatureInvalid, SigningUnavailable
from store.limits import SSH_KEYGEN_SECONDS

NAMESPACE = "skillfleet"
SSH_KEYGEN = "ssh-keygen"
# `ssh-keygen -l`'s line: bits, fingerprint, comment, (type).
_LISTED = re.compile(r"(\d+) (SHA256:[A-Za-z0-9+/=]+) .*\(([A-Z0-9-]+)\)")
_FINGERPRINT = re.compile(r"SHA256:[A-Za-z0-9+/=]+")


@dataclass(frozen=True)
class KeyFacts:
    """What ssh-keygen reads of a public key: its size, fingerprint and kind (ED25519, RSA…)."""

    bits: int
    fingerprint: str
    kind: str


def key_facts(public_key: str) -> KeyFacts:
    """ssh-keygen's reading of one public key line `<type> <base64>`; KeyInvalid if it can't."""
    with tempfile.TemporaryDirectory(prefix="skillfleet-key-") as folder:
        path = Path(folder) / "key.pub"
        path.write_text(public_key + "\n", encoding="ascii")
        done = _run(["-l", "-f", str(path)])
    found = _LISTED.match(done.stdout.decode("utf-8", "replace").strip())
    if done.returncode != 0 or found is None:
        raise KeyInvalid("ssh-keygen could not read it as an SSH public key.")
    return KeyFacts(int(found.group(1)), found.group(2), found.group(3))


def signer_fingerprint(signature: bytes, message: bytes) -> str:
    """The fingerprint of the key that made `signature` over exactly `message` in the
    skillfleet namespace, whoever holds it; SignatureInvalid when it does not verify."""
    with tempfile.TemporaryDirectory(prefix="skillfleet-sig-") as folder:
        path = Path(folder) / "skillfleet.sig"
        path.write_bytes(signature)
        done = _run(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(path)], message)
    said = done.stdout.decode("utf-8", "replace")
    found = _FINGERPRINT.search(said)
    if done.returncode != 0 or found is None:
        raise SignatureInvalid(_refusal(done.stderr))
    return found.group(0)


def verified_by(signature: bytes, message: bytes, principal: str, allowed_signer: str) -> bool:
    """Whether `signature` over `message` verifies as `principal`'s with the one
    allowed_signers line `allowed_signer` (what git runs for a signed commit)."""
    with tempfile.TemporaryDirectory(prefix="skillfleet-sig-") as folder:
        signature_path = Path(folder) / "skillfleet.sig"
        signature_path.write_bytes(signature)
        allowed = Path(folder) / "allowed_signers"
        allowed.write_text(allowed_signer + "\n", encoding="ascii")
        command = ["-Y", "verify", "-f", str(allowed), "-I", principal, "-n", NAMESPACE]
        done = _run([*command, "-s", str(signature_path)], message)
    return done.returncode == 0


def sign(message: bytes, key: Path) -> bytes:
    """An armored signature over `message` in the skillfleet namespace by the private key at
    `key` (or, given a .pub file, by that key in the SSH agent). ssh-keygen asks for a
    passphrase on the terminal itself, so no time limit applies."""
    try:
        done = subprocess.run(
            [SSH_KEYGEN, "-Y", "sign", "-n", NAMESPACE, "-f", str(key)],
            input=message,
            capture_output=True,
            check=False,
        )
    except FileNotFoundError as e:
        raise SigningUnavailable(_MISSING) from e
    if done.returncode != 0 or not done.stdout.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        said = done.stderr.decode("utf-8", "replace").strip() or "no reason given"
        raise SigningUnavailable(f"ssh-keygen could not sign with {key}: {said}")
    return done.stdout


_MISSING = "ssh-keygen (OpenSSH's client tools) is not installed; it checks skill signatures."


def _run(arguments: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            [SSH_KEYGEN, *arguments],
            input=stdin,
            capture_output=True,
            timeout=SSH_KEYGEN_SECONDS,
            check=False,
        )
    except FileNotFoundError as e:
        raise SigningUnavailable(_MISSING) from e
    except subprocess.TimeoutExpired as e:
        raise SigningUnavailable(
            f"ssh-keygen did not answer within {SSH_KEYGEN_SECONDS:g} seconds."
        ) from e


def _refusal(stderr: bytes) -> str:
    """Why a signature was refused, in ssh-keygen's words when it gave some."""
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines()]
    # Lines naming the temporary files are left out: the caller never saw those paths.
    reasons = [
        line
        for line in lines
        if line and line != "Could not verify signature." and "skillfleet-sig-" not in line
    ]
    reason = f" (ssh-keygen: {reasons[0][:200]})" if reasons else ""
    return (
        "skillfleet.sig does not verify: it is not an SSH signature in the 'skillfleet' "
        f"namespace over this skill's content hash{reason}."
    )

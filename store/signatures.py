"""Signed skills: what a skill's `skillfleet.sig` says of its author, and the hold an owner who
requires signatures puts on content that no key of theirs signed.

What an author signs is the skill's content hash (store/hashing.py) written as its 64 lowercase
hexadecimal characters, nothing before or after it (no newline), with `ssh-keygen -Y sign` in the
namespace `skillfleet`; the armored signature ships as `skillfleet.sig` at the skill's root,
which the hash leaves out. `skillfleet skills sign DIR --key KEY` does it.

An install takes the file out of the skill's folder and keeps its text with the skill, so the
folder, its packages and what scripts see hold the signed content only. Its verdict is one of:
unsigned (no file); untrusted (a good signature by a key the owner does not trust, shown by
its fingerprint); trusted (verified with a key the owner trusts, whose name is `signed_by`).
A file that does not verify refuses the install (422 signature_invalid), whoever's key it
names: a signature is never ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session

from store.auditevents import audit_enabled_override
from store.errors import SignatureInvalid, SignatureRequired
from store.hashing import SIGNATURE_FILE
from store.limits import KIB, MAX_SIGNATURE_BYTES
from store.models import Owner, Skill, TrustedKey
from store.sshkeygen import NAMESPACE, signer_fingerprint, verified_by

log = structlog.get_logger(__name__)

# A skill's signature_status (store/models.py).
STATUSES = ("trusted", "untrusted", "unsigned")


@dataclass(frozen=True)
class Verdict:
    """A skill's signature (its armored text), the fingerprint of the key that made it, and
    the name of the owner's trusted key it verified with; all None when it is unsigned."""

    signature: str | None = None
    fingerprint: str | None = None
    signed_by: str | None = None


def take_signature(root: Path) -> bytes | None:
    """Read `skillfleet.sig` at the staged skill's `root` and remove it from the folder
    (None: there is none)."""
    path = root / SIGNATURE_FILE
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_symlink() or not path.is_file():
        raise SignatureInvalid(f"{SIGNATURE_FILE} at the skill's root must be a regular file.")
    if path.stat().st_size > MAX_SIGNATURE_BYTES:
        raise SignatureInvalid(
            f"{SIGNATURE_FILE} is larger than {MAX_SIGNATURE_BYTES // KIB} KiB; an SSH "
            "signature is a few hundred bytes."
        )
    data = path.read_bytes()
    path.unlink()
    return data


def message(skill_hash: str) -> bytes:
    """The bytes a skill's signature covers: its content hash as hexadecimal text."""
    return skill_hash.encode("ascii")


def allowed_signer(key: TrustedKey) -> str:
    """The key as a line of ssh-keygen's allowed_signers file, its name the principal."""
    return f'{key.name} namespaces="{NAMESPACE}" {key.public_key}'


def judge(signature: bytes | None, skill_hash: str, keys: Sequence[TrustedKey]) -> Verdict:
    """The verdict on `signature` over the content hash `skill_hash`, for an owner who trusts
    `keys`; SignatureInvalid when it does not verify at all."""
    if signature is None:
        return Verdict()
    signed = message(skill_hash)
    fingerprint = signer_fingerprint(signature, signed)
    try:
        text = signature.decode("ascii")
    except UnicodeDecodeError as e:
        raise SignatureInvalid(f"{SIGNATURE_FILE} holds bytes an SSH signature has not.") from e
    for key in keys:
        if key.fingerprint == fingerprint and verified_by(
            signature, signed, key.name, allowed_signer(key)
        ):
            return Verdict(text, fingerprint, key.name)
    return Verdict(text, fingerprint, None)


def owner_keys(session: Session, owner_id: int) -> list[TrustedKey]:
    """The keys the owner trusts, by name."""
    query = select(TrustedKey).where(TrustedKey.owner_id == owner_id).order_by(TrustedKey.name)
    return list(session.scalars(query))


def requires_signature(session: Session, owner_id: int | None) -> bool:
    owner = session.get(Owner, owner_id) if owner_id is not None else None
    return bool(owner is not None and owner.require_signature)


def settle(session: Session, skill: Skill, verdict: Verdict, enable: bool | None) -> bool | None:
    """Write `verdict` on the row of the skill being installed and hold it when its owner
    requires signatures and no trusted key signed it; the switch the install sets (a held
    skill is not switched on; `enable=None`, an edit's, keeps the switch as it is)."""
    skill.signature = verdict.signature
    skill.signer_fingerprint = verdict.fingerprint
    skill.signed_by = verdict.signed_by
    skill.signature_hold = verdict.signed_by is None and requires_signature(session, skill.owner_id)
    return False if skill.signature_hold and enable else enable


def check_switch_on(session: Session, skill: Skill, override: bool) -> None:
    """Let a held skill be switched on only with the override, which is recorded; a hold
    whose owner no longer requires signatures is simply lifted."""
    if not skill.signature_hold:
        return
    if not requires_signature(session, skill.owner_id):
        skill.signature_hold = False
        return
    if not override:
        raise SignatureRequired(
            f"'{skill.name}' is held: your settings require a signature by a key you trust, "
            f"and {_why_held(skill)}. Trust its signer's key (POST /api/trusted-keys), or "
            "enable it with override_signature: true."
        )
    record_signature_override(session, skill)
    skill.signature_hold = False


def record_signature_override(session: Session, skill: Skill) -> None:
    """The one place an override is written down: the owner switched on `skill`, which no key
    they trust signed, although they require signatures. The audit trail records it here, in
    the same transaction as the switch."""
    log.info(
        "signature override",
        owner_id=skill.owner_id,
        skill=skill.name,
        hash=skill.hash,
        signature=skill.signature_status,
        signer_fingerprint=skill.signer_fingerprint,
    )
    assert skill.owner_id is not None  # only an owned skill is held
    session.flush()
    reason = skill.signature_status
    audit_enabled_override(session, skill.owner_id, "owner", skill.name, skill.hash, reason)


def set_required(session: Session, owner_id: int, required: bool) -> None:
    """Turn the owner's require_signature on or off. On, every skill of theirs no trusted key
    signed is held (those switched on stay on until switched off); off, every hold is lifted."""
    owner = session.get(Owner, owner_id)
    assert owner is not None, "the caller's owner exists"
    if owner.require_signature == required:
        return
    owner.require_signature = required
    for skill in session.scalars(select(Skill).where(Skill.owner_id == owner_id)):
        held = required and skill.signed_by is None
        if skill.signature_hold != held:
            skill.signature_hold = held


def _why_held(skill: Skill) -> str:
    if skill.signer_fingerprint is None:
        return "it is unsigned"
    return f"it is signed by a key you don't trust ({skill.signer_fingerprint})"

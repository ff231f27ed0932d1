"""The SSH public keys an owner trusts to sign skills, each under a name that skills signed with
it show as `signed_by`.

A key is sent as a public key line (`ssh-ed25519 AAAA… comment`, a `.pub` file's text) or as a
line of an allowed_signers file (`principal [namespaces="…"] ssh-ed25519 AAAA…`), whose
principal is the name when none is given. Only Ed25519, RSA of 2048 bits or more and ECDSA keys
(and their security-key `sk-` kinds) are trusted; ssh-keygen reads each one and gives its
fingerprint. Trusting a key makes the owner's skills it signed trusted; no longer trusting it
makes them untrusted, and held when the owner requires signatures.
"""

from __future__ import annotations

import binascii
import re
from base64 import b64decode
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from store.errors import KeyExists, KeyInvalid, KeyNotFound, TooManyKeys
from store.limits import (
    MAX_KEY_NAME_CHARS,
    MAX_PUBLIC_KEY_CHARS,
    MAX_TRUSTED_KEYS,
    MIN_RSA_BITS,
)
from store.models import Skill, TrustedKey, utcnow
from store.signatures import judge, owner_keys, requires_signature
from store.sshkeygen import NAMESPACE, key_facts

# Each key type skillfleet trusts, and the kind ssh-keygen names it by.
KEY_TYPES = {
    "ssh-ed25519": "ED25519",
    "ssh-rsa": "RSA",
    "ecdsa-sha2-nistp256": "ECDSA",
    "ecdsa-sha2-nistp384": "ECDSA",
    "ecdsa-sha2-nistp521": "ECDSA",
    "sk-ssh-ed25519@openssh.com": "ED25519-SK",
    "sk-ecdsa-sha2-nistp256@openssh.com": "ECDSA-SK",
}
KINDS = "Ed25519, RSA (2048 bits or more) and ECDSA SSH keys"
KEY_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@+-]{{0,{MAX_KEY_NAME_CHARS - 1}}}")
NAME_RULE = (
    f"A key's name has 1 to {MAX_KEY_NAME_CHARS} characters: letters, digits and . _ @ + -, "
    "starting with a letter or digit (an email address will do)."
)
MAX_COMMENT_CHARS = 200
_TOKEN = re.compile(r'(?:[^\s"]+|"[^"]*")+')
_TYPE_LIKE = re.compile(r"[a-z0-9][a-z0-9@.-]{0,63}")


@dataclass(frozen=True)
class KeyLine:
    """A key line read: the principal of an allowed_signers line, the key and its comment."""

    principal: str | None
    key_type: str
    blob: str
    comment: str | None


def is_key_name(name: object) -> bool:
    return isinstance(name, str) and KEY_NAME.fullmatch(name) is not None


def read_key_line(text: str) -> KeyLine:
    """The key in a public key line or an allowed_signers line; KeyInvalid with the reason."""
    line = _one_line(text)
    tokens = _TOKEN.findall(line)
    at = next((i for i in range(len(tokens) - 1) if _is_key(tokens[i], tokens[i + 1])), None)
    if at is None:
        raise KeyInvalid(
            f"This is not an SSH public key: send one line such as 'ssh-ed25519 AAAA… "
            f"comment' (a .pub file) or an allowed_signers line. {KINDS} can be trusted."
        )
    key_type = tokens[at]
    if key_type not in KEY_TYPES:
        raise KeyInvalid(f"A {key_type[:64]} key can't be trusted: only {KINDS} can.")
    before = tokens[:at]
    if len(before) > 2:
        raise KeyInvalid("The line has more before the key than a principal and its options.")
    if len(before) == 2:
        _check_options(before[1])
    principal = before[0].strip('"') if before else None
    comment = " ".join(tokens[at + 2 :])[:MAX_COMMENT_CHARS] or None
    return KeyLine(principal, key_type, tokens[at + 1], comment)


def trust_key(session: Session, owner_id: int, name: object, text: object) -> TrustedKey:
    """Trust the key in `text` under `name` (None: the allowed_signers line's principal);
    the owner's skills it signed become trusted."""
    if not isinstance(text, str) or not text.strip():
        raise KeyInvalid("Send the public key as text in 'public_key'.")
    if len(text) > MAX_PUBLIC_KEY_CHARS:
        raise KeyInvalid(f"A public key line has at most {MAX_PUBLIC_KEY_CHARS} characters.")
    read = read_key_line(text)
    chosen = name if name is not None else read.principal
    if chosen is None:
        raise KeyInvalid("Give the key a name: skills it signed show it as signed_by.")
    if not is_key_name(chosen):
        raise KeyInvalid(NAME_RULE)
    assert isinstance(chosen, str)
    public_key = f"{read.key_type} {read.blob}"
    facts = key_facts(public_key)
    _check_facts(read.key_type, facts.kind, facts.bits)
    _check_room(session, owner_id, chosen, facts.fingerprint)
    key = TrustedKey(
        owner_id=owner_id,
        name=chosen,
        key_type=read.key_type,
        public_key=public_key,
        fingerprint=facts.fingerprint,
        bits=facts.bits,
        comment=read.comment,
        created_at=utcnow(),
    )
    session.add(key)
    session.flush()
    _trust_signed(session, owner_id, key)
    return key


def trusted_keys(session: Session, owner_id: int) -> list[TrustedKey]:
    return owner_keys(session, owner_id)


def distrust_key(session: Session, owner_id: int, name: str) -> str:
    """Trust the key `name` no longer: skills it signed become untrusted, and held (switched
    off) when the owner requires signatures. Its fingerprint."""
    key = None
    if is_key_name(name):
        key = session.scalar(
            select(TrustedKey).where(TrustedKey.owner_id == owner_id, TrustedKey.name == name)
        )
    if key is None:
        shown = name if len(name) <= 80 else name[:77] + "..."
        raise KeyNotFound(f"You trust no key named {shown!r}.")
    hold = requires_signature(session, owner_id)
    signed = select(Skill).where(Skill.owner_id == owner_id, Skill.signed_by == key.name)
    for skill in session.scalars(signed):
        skill.signed_by = None
        if hold:
            skill.signature_hold = True
            skill.enabled = False
            skill.updated_at = utcnow()
    session.delete(key)
    return key.fingerprint


def _trust_signed(session: Session, owner_id: int, key: TrustedKey) -> None:
    """Verify again, with `key`, each skill of the owner's whose signature its key made."""
    signed = select(Skill).where(
        Skill.owner_id == owner_id,
        Skill.signer_fingerprint == key.fingerprint,
        Skill.signature.is_not(None),
    )
    for skill in session.scalars(signed):
        assert skill.signature is not None
        verdict = judge(skill.signature.encode("ascii"), skill.hash, [key])
        if verdict.signed_by is not None:
            skill.signed_by = verdict.signed_by
            skill.signature_hold = False


def _one_line(text: str) -> str:
    stripped = text.strip()
    if "PRIVATE KEY" in stripped:
        raise KeyInvalid("This is a private key: send the public key (the .pub file) instead.")
    if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in stripped):
        raise KeyInvalid("Send one key on one line, without control characters.")
    return stripped


def _is_key(key_type: str, blob: str) -> bool:
    """Whether `key_type blob` looks like an SSH key: a type name and base64 text."""
    if not _TYPE_LIKE.fullmatch(key_type) or not blob.startswith("AAAA"):
        return False
    try:
        b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _check_options(options: str) -> None:
    """allowed_signers options: only a namespaces list that lets the key sign skills."""
    for option in _split_options(options):
        label, _, value = option.partition("=")
        if label.lower() != "namespaces":
            raise KeyInvalid(
                f"The allowed_signers option {option[:60]!r} is not one skillfleet keeps; "
                "send the line without it."
            )
        names = [part.strip() for part in value.strip('"').split(",")]
        if NAMESPACE not in names and "*" not in names:
            raise KeyInvalid(
                f"The line limits the key to the namespaces {value[:80]}; a key that signs "
                f"skills needs the namespace {NAMESPACE!r}."
            )


def _split_options(options: str) -> list[str]:
    parts, current, quoted = [], "", False
    for char in options:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


def _check_facts(key_type: str, kind: str, bits: int) -> None:
    if KEY_TYPES[key_type] != kind:
        raise KeyInvalid(f"The line says {key_type}, but the key in it is an {kind} key.")
    if kind == "RSA" and bits < MIN_RSA_BITS:
        raise KeyInvalid(
            f"This RSA key has {bits} bits; an RSA key needs at least {MIN_RSA_BITS} to be trusted."
        )


def _check_room(session: Session, owner_id: int, name: str, fingerprint: str) -> None:
    mine = select(TrustedKey).where(TrustedKey.owner_id == owner_id)
    if session.scalar(mine.where(TrustedKey.name == name)) is not None:
        raise KeyExists(f"You already trust a key named '{name}'.")
    same = session.scalar(mine.where(TrustedKey.fingerprint == fingerprint))
    if same is not None:
        raise KeyExists(f"You already trust this key, as '{same.name}' ({fingerprint}).")
    count = session.scalar(
        select(func.count()).select_from(TrustedKey).where(TrustedKey.owner_id == owner_id)
    )
    if (count or 0) >= MAX_TRUSTED_KEYS:
        raise TooManyKeys(f"You already trust {MAX_TRUSTED_KEYS} keys, the most one owner may.")

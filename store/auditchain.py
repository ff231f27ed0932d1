"""Checking an audit chain (store/audit.py) from its exported records: what the CLI's
`skillfleet audit verify` runs on the API's JSON Lines export, with nothing of the server side
(no database, no SQLAlchemy).

A record's hash is the SHA-256 of `canonical` of its hashed fields; the first record of a
chain has `GENESIS` as its prev_hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson

GENESIS = "0" * 64
HASHED = ("owner_id", "seq", "created_at", "kind", "actor", "subject", "facts", "prev_hash")


class AuditKind(StrEnum):
    """What a record is about."""

    POLICY_DECISION = "policy.decision"  # subject: call id
    APPROVAL_DECIDED = "approval.decided"  # subject: approval id
    QUESTION_ANSWERED = "question.answered"  # subject: question id
    RUN_STARTED = "run.started"  # subject: run id
    RUN_ENDED = "run.ended"  # subject: run id
    SECRET_RELEASED = "secret.released"  # subject: run id; facts: names only
    SKILL_CHANGED = "skill.changed"  # subject: skill name; facts: hash before and after
    SKILL_ROLLED_BACK = "skill.rolled_back"  # subject: skill name
    SKILL_ENABLED_OVERRIDE = "skill.enabled_override"  # subject: skill name
    TRUST_CHANGED = "trust.changed"  # subject: trusted key name
    TOKEN_CHANGED = "token.changed"  # subject: token id
    SETTINGS_CHANGED = "settings.changed"  # subject: the setting's name


KINDS = tuple(str(kind) for kind in AuditKind)


def canonical(fields: Mapping[str, Any]) -> bytes:
    """The bytes a record's hash is taken over: compact JSON, keys sorted, UTF-8 unescaped
    (what `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)` writes,
    made by orjson in a tenth of the time)."""
    return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)


def timestamp(when: datetime) -> str:
    """A record's time as the chain hashes it: UTC, microseconds, `Z`."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Break:
    """Where a chain stops holding: the record's seq and why."""

    seq: int | None
    reason: str


@dataclass(frozen=True)
class Checked:
    """What `verify` found: how many records, the first and last seq, the last hash, and
    the first break (None: the chain holds)."""

    records: int
    first_seq: int | None
    last_seq: int | None
    last_hash: str | None
    broken: Break | None


def verify(records: Iterable[Mapping[str, Any]]) -> Checked:
    """Check exported records (`exported`, in seq order) of one owner: each one's hash is
    that of its content, its seq follows the one before, and its prev_hash is that one's
    hash. The first record's prev_hash is taken as given (earlier ones may have been trimmed)."""
    count, first, before, last_hash = 0, None, None, None
    for record in records:
        count += 1
        seq, problem = _problem(record, before, last_hash)
        if problem is not None:
            return Checked(count, first, before, last_hash, Break(seq, problem))
        first = seq if first is None else first
        before, last_hash = seq, str(record["hash"])
    return Checked(count, first, before, last_hash, None)


def _problem(
    record: Mapping[str, Any], before: int | None, last_hash: str | None
) -> tuple[int | None, str | None]:
    """The record's seq and what is wrong with it (None: nothing)."""
    seq = record.get("seq")
    if not isinstance(seq, int) or any(name not in record for name in (*HASHED, "hash")):
        return (seq if isinstance(seq, int) else None), "the record lacks fields the chain needs"
    if before is not None and seq != before + 1:
        return seq, f"seq {seq} follows seq {before}: records between them are missing"
    if last_hash is not None and record["prev_hash"] != last_hash:
        return seq, f"its prev_hash is not the hash of seq {before}"
    if seq == 1 and record["prev_hash"] != GENESIS:
        return seq, "the first record's prev_hash is not the chain's start"
    digest = hashlib.sha256(canonical({name: record[name] for name in HASHED})).hexdigest()
    if digest != record["hash"]:
        return seq, "its content does not match its hash: it was changed after it was written"
    return seq, None

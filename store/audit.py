"""The audit trail: an owner's append-only record of what was decided, answered, run, released
and changed, each record holding the hash of the one before it.

One chain per owner. Record `seq` n of an owner holds `prev_hash`, the hash of record n - 1
(`GENESIS` for the first), and `hash`, the SHA-256 of its canonical text
(store/auditchain.py): the owner, seq, time, kind, actor, subject, facts and prev_hash as
compact JSON with sorted keys. A record changed, removed or inserted afterwards no longer fits
its neighbours, and `auditchain.verify` names the first one that doesn't.

Appends never fork a chain: `append` first moves the owner's head row (`audit_heads`: the
last seq) by one UPDATE that also reads the hash of the record before, which takes that row's
lock on PostgreSQL (a concurrent append of the owner waits for this transaction to end, then
reads the head it left) and SQLite's one write lock; the record follows in the same
transaction. Two statements an append: it is written for every call and run. So an append
belongs in the transaction of the change it records, as its last statement (the head's lock is
then held for the commit only), and is undone with it.

Retention trims the oldest records (`trim`) but each owner's last, so the chain goes on, and
`auditchain.verify` takes the first record it is given as it is (its prev_hash is not checked
against anything).

Facts are small: names, hashes, ids, counts, outcomes. Never a call's arguments, a run's
output or a secret's value: a value is a string (cut at MAX_FACT_CHARS), a whole number, a
boolean or a list of strings, so no argument object fits in one; a fact given as None (it does
not apply) is left out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import BigInteger, Table, bindparam, delete, insert, literal_column, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from store.auditchain import GENESIS, canonical, timestamp
from store.auditchain import KINDS as KINDS
from store.auditchain import AuditKind as AuditKind
from store.db import CoreConnection
from store.models import AuditHead, AuditRecord, utcnow

MAX_FACT_CHARS = 300
MAX_FACTS = 16
MAX_LIST_ITEMS = 64
MAX_SUBJECT_CHARS = 300
MAX_ACTOR_CHARS = 100

Fact = str | int | bool | None | list[str]
Connection = Session | CoreConnection


_HEADS = cast(Table, AuditHead.__table__)
_RECORDS = cast(Table, AuditRecord.__table__)
# The hash of the owner's record before the head's new seq: read in the statement that moves
# the head, so an append is two statements (this one and its INSERT).
# RETURNING names the head's columns bare, so the subquery's own are an alias's, and the
# head's seq is spelled out.
_EARLIER = _RECORDS.alias("earlier")
_PREVIOUS = (
    select(_EARLIER.c.hash)
    .where(
        _EARLIER.c.owner_id == bindparam("owner"),
        _EARLIER.c.seq == literal_column("audit_heads.seq", BigInteger) - 1,
    )
    .scalar_subquery()
)
# Moves the owner's head on by one and reads it: the lock that keeps the chain one line.
_ADVANCE = (
    update(_HEADS)
    .where(_HEADS.c.owner_id == bindparam("owner"))
    .values(seq=_HEADS.c.seq + 1)
    .returning(_HEADS.c.seq, _PREVIOUS.label("prev_hash"))
)
_PREVIOUS_AGAIN = select(_RECORDS.c.hash).where(
    _RECORDS.c.owner_id == bindparam("owner"), _RECORDS.c.seq == bindparam("seq")
)
_NEW_HEAD = {
    name: dialect.insert(_HEADS).on_conflict_do_nothing(index_elements=["owner_id"])
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
_INSERT = insert(_RECORDS)


class AuditError(ValueError):
    """Raised when a record would hold what the audit never holds (a nested value, too many
    facts): a programming error, never the caller's input."""


@dataclass(frozen=True)
class Entry:
    """One record as the chain hashes it."""

    owner_id: int
    seq: int
    created_at: datetime
    kind: str
    actor: str
    subject: str
    facts: dict[str, Fact]
    prev_hash: str

    def canonical(self) -> bytes:
        return canonical(self.as_hashed())

    def as_hashed(self) -> dict[str, Any]:
        """The fields the hash covers, as the export shows them."""
        return {
            "owner_id": self.owner_id,
            "seq": self.seq,
            "created_at": timestamp(self.created_at),
            "kind": self.kind,
            "actor": self.actor,
            "subject": self.subject,
            "facts": self.facts,
            "prev_hash": self.prev_hash,
        }

    def digest(self) -> str:
        return hashlib.sha256(self.canonical()).hexdigest()


def append(
    connection: Connection,
    owner_id: int,
    kind: AuditKind,
    actor: str,
    subject: str,
    facts: Mapping[str, Fact] | None = None,
) -> Entry:
    """Append one record to the owner's chain, in the caller's transaction (its last
    statement: the owner's head stays locked until the commit)."""
    if not _enabled:
        return Entry(owner_id, 0, utcnow(), str(kind), actor, subject, {}, GENESIS)
    checked = _checked(facts or {})
    seq, prev_hash = _advance(connection, owner_id)
    # Whole microseconds in UTC: what both databases keep and give back.
    entry = Entry(
        owner_id, seq, utcnow(), str(kind), actor[:MAX_ACTOR_CHARS],
        subject[:MAX_SUBJECT_CHARS], checked, prev_hash,
    )  # fmt: skip
    digest = entry.digest()
    values = {
        "owner_id": owner_id, "seq": seq, "created_at": entry.created_at, "kind": entry.kind,
        "actor": entry.actor, "subject": entry.subject, "facts": checked,
        "prev_hash": prev_hash, "hash": digest,
    }  # fmt: skip
    connection.execute(_INSERT, values)
    return entry


def _advance(connection: Connection, owner_id: int) -> tuple[int, str]:
    """The owner's next seq and the hash before it, with the owner's head locked."""
    row = connection.execute(_ADVANCE, {"owner": owner_id}).first()
    if row is None:  # the owner's first record: its head is made once, whoever races
        dialect = _dialect(connection)
        connection.execute(_NEW_HEAD[dialect], {"owner_id": owner_id, "seq": 0})
        row = connection.execute(_ADVANCE, {"owner": owner_id}).first()
        assert row is not None
    seq, previous = int(row.seq), row.prev_hash
    if seq == 1:
        return seq, GENESIS
    if previous is None:
        # PostgreSQL: the UPDATE waited for another append's lock; its subquery read the
        # snapshot from before that append committed. A new statement sees it.
        previous = connection.execute(_PREVIOUS_AGAIN, {"owner": owner_id, "seq": seq - 1}).scalar()
    if previous is None:
        raise AuditError(f"The audit chain of owner {owner_id} lost its last record.")
    return seq, str(previous)


def _dialect(connection: Connection) -> str:
    bind = connection.get_bind() if isinstance(connection, Session) else connection
    return str(bind.dialect.name)


def _checked(facts: Mapping[str, Fact]) -> dict[str, Fact]:
    if len(facts) > MAX_FACTS:
        raise AuditError(f"An audit record holds at most {MAX_FACTS} facts.")
    kept: dict[str, Fact] = {}
    for key, value in facts.items():
        if isinstance(value, str):
            kept[key] = value[:MAX_FACT_CHARS]
        elif value is None:
            continue  # a fact that does not apply is left out (and the row's JSON stays fast)
        elif isinstance(value, bool | int):
            kept[key] = value
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            kept[key] = [item[:MAX_FACT_CHARS] for item in value[:MAX_LIST_ITEMS]]
        else:
            raise AuditError(f"The audit fact {key!r} is not a name, number or list of names.")
    return kept


# -- the benchmark's switch ---------------------------------------------------------------

_enabled = True


def switch(on: bool) -> None:
    """Turn appending on or off for this process: for the benchmark that measures what the
    audit costs (SKILLFLEET_BENCH_AUDIT_OFF), never for a deployment."""
    global _enabled
    _enabled = on


# -- reading and trimming ----------------------------------------------------------------


def entry_of(record: AuditRecord) -> Entry:
    return Entry(
        record.owner_id, record.seq, record.created_at, record.kind, record.actor,
        record.subject, dict(record.facts), record.prev_hash,
    )  # fmt: skip


def exported(record: AuditRecord) -> dict[str, Any]:
    """A record as the API shows and exports it: the hashed fields and its hash."""
    return {**entry_of(record).as_hashed(), "hash": record.hash}


def trim(connection: Connection, older_than: timedelta, limit: int) -> int:
    """Remove at most `limit` records older than `older_than`, oldest first; how many went.

    Each owner's last record stays, however old: the next append reads its hash.
    """
    cutoff = utcnow() - older_than
    last = select(_HEADS.c.seq).where(_HEADS.c.owner_id == _RECORDS.c.owner_id).scalar_subquery()
    oldest = (
        select(_RECORDS.c.id)
        .where(_RECORDS.c.created_at < cutoff, _RECORDS.c.seq < last)
        .order_by(_RECORDS.c.created_at)
        .limit(limit)
    )
    ids = [row.id for row in connection.execute(oldest)]
    if ids:
        connection.execute(delete(_RECORDS).where(_RECORDS.c.id.in_(ids)))
    return len(ids)

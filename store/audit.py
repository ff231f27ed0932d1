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
transaction. Two statements an append: it is written for every call and run, so the two are
run as each database's own SQL on the driver's connection (store/auditsql.py), and the record
has its key, `(owner_id, seq)`, and one index besides, the subject's. So an append belongs in
the transaction of the change it records, as its last statement (the head's lock is then held
for the commit only), and is undone with it.

Retention trims each chain from its start (`trim`) but each owner's last record, so the chain
goes on, and `auditchain.verify` takes the first record it is given as it is (its prev_hash is
not checked against anything).

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

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from store import auditsql
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
# The record before an append's seq, read again when the head's UPDATE could not see it.
_PREVIOUS_AGAIN = select(_RECORDS.c.hash).where(
    _RECORDS.c.owner_id == bindparam("owner"), _RECORDS.c.seq == bindparam("seq")
)
_NEW_HEAD = {
    name: dialect.insert(_HEADS).on_conflict_do_nothing(index_elements=["owner_id"])
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


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
    dialect, dbapi = auditsql.driver(connection)
    seq, prev_hash = _advance(connection, dialect, dbapi, owner_id)
    # Whole microseconds in UTC: what both databases keep and give back.
    entry = Entry(
        owner_id, seq, utcnow(), str(kind), actor[:MAX_ACTOR_CHARS],
        subject[:MAX_SUBJECT_CHARS], checked, prev_hash,
    )  # fmt: skip
    auditsql.insert(
        dialect, dbapi,
        (owner_id, seq, entry.created_at, entry.kind, entry.actor, entry.subject, checked,
         prev_hash, entry.digest()),
    )  # fmt: skip
    return entry


def _advance(connection: Connection, dialect: str, dbapi: Any, owner_id: int) -> tuple[int, str]:
    """The owner's next seq and the hash before it, with the owner's head locked."""
    row = auditsql.advance(dialect, dbapi, owner_id)
    if row is None:  # the owner's first record: its head is made once, whoever races
        connection.execute(_NEW_HEAD[dialect], {"owner_id": owner_id, "seq": 0})
        row = auditsql.advance(dialect, dbapi, owner_id)
        assert row is not None
    seq, previous = int(row[0]), row[1]
    if seq == 1:
        return seq, GENESIS
    if previous is None:
        # PostgreSQL: the UPDATE waited for another append's lock; its subquery read the
        # snapshot from before that append committed. A new statement sees it.
        previous = connection.execute(_PREVIOUS_AGAIN, {"owner": owner_id, "seq": seq - 1}).scalar()
    if previous is None:
        raise AuditError(f"The audit chain of owner {owner_id} lost its last record.")
    return seq, str(previous)


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
    """Remove at most `limit` records older than `older_than`; how many went.

    Each chain is trimmed from its start, along its key: its oldest records by seq, up to the
    first that is not older (a record dated earlier than one before it, as another host's
    clock may write it, waits for that one), so what stays of a chain is whole from its first
    record on. Each owner's last record stays, however old: the next append reads its hash.
    """
    cutoff = utcnow() - older_than
    first = (
        select(_RECORDS.c.created_at)
        .where(_RECORDS.c.owner_id == _HEADS.c.owner_id)
        .order_by(_RECORDS.c.seq)
        .limit(1)
        .scalar_subquery()
    )
    chains = (
        select(_HEADS.c.owner_id, _HEADS.c.seq).where(first < cutoff).order_by(_HEADS.c.owner_id)
    )
    removed = 0
    for owner_id, last in connection.execute(chains).all():
        if removed >= limit:
            break
        removed += _trim_chain(connection, owner_id, last, cutoff, limit - removed)
    return removed


def _trim_chain(
    connection: Connection, owner_id: int, last: int, cutoff: datetime, limit: int
) -> int:
    """Remove the owner's oldest records (at most `limit`, never seq `last`) written before
    `cutoff`, up to the first that was not."""
    oldest = (
        select(_RECORDS.c.seq, _RECORDS.c.created_at)
        .where(_RECORDS.c.owner_id == owner_id, _RECORDS.c.seq < last)
        .order_by(_RECORDS.c.seq)
        .limit(limit)
    )
    count, upto = 0, None
    for seq, created_at in connection.execute(oldest):
        if created_at >= cutoff:
            break
        count, upto = count + 1, seq
    if upto is not None:
        connection.execute(
            delete(_RECORDS).where(_RECORDS.c.owner_id == owner_id, _RECORDS.c.seq <= upto)
        )
    return count

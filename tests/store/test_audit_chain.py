"""The audit chain: appended in the caller's transaction, one unbroken line per owner however
many processes append at once, and every change made to it afterwards found."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from store import audit, auditchain, auditsql
from store.audit import AuditError, AuditKind
from store.auditchain import GENESIS
from store.db import make_engine, make_sessions, transaction
from store.models import AuditRecord, utcnow
from store.tokens import ensure_owner

pytestmark = pytest.mark.both_databases  # the head's lock is each dialect's own


@pytest.fixture
def sessions(database_url):
    engine = make_engine(database_url)
    yield make_sessions(engine)
    engine.dispose()


def owner(sessions, name="alice") -> int:
    with transaction(sessions) as session:
        return ensure_owner(session, name).id


def chain(sessions, owner_id: int) -> list[dict]:
    with sessions() as session:
        rows = session.scalars(
            select(AuditRecord).where(AuditRecord.owner_id == owner_id).order_by(AuditRecord.seq)
        )
        return [audit.exported(row) for row in rows]


def test_records_follow_each_other_and_verify(sessions):
    alice = owner(sessions)
    for number in range(3):
        with transaction(sessions) as session:
            audit.append(
                session, alice, AuditKind.SKILL_CHANGED, "owner:1", "hello",
                {"before": None if number == 0 else "a" * 64, "after": "b" * 64},
            )  # fmt: skip
    records = chain(sessions, alice)
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert records[0]["prev_hash"] == GENESIS
    assert records[1]["prev_hash"] == records[0]["hash"]
    checked = auditchain.verify(records)
    assert checked.broken is None and checked.records == 3
    assert checked.last_hash == records[-1]["hash"]


def test_a_record_rolled_back_with_its_transaction_leaves_no_gap(sessions):
    alice = owner(sessions)
    with pytest.raises(RuntimeError), transaction(sessions) as session:
        audit.append(session, alice, AuditKind.TOKEN_CHANGED, "owner:1", "7", {"change": "x"})
        raise RuntimeError("the change failed")
    with transaction(sessions) as session:
        audit.append(session, alice, AuditKind.TOKEN_CHANGED, "owner:1", "8", {"change": "y"})
    records = chain(sessions, alice)
    assert [r["seq"] for r in records] == [1]
    assert auditchain.verify(records).broken is None


def test_owners_have_chains_of_their_own(sessions):
    alice, bob = owner(sessions), owner(sessions, "bob")
    for who in (alice, bob, alice):
        with transaction(sessions) as session:
            audit.append(session, who, AuditKind.RUN_STARTED, "worker", "run-1")
    assert [r["seq"] for r in chain(sessions, alice)] == [1, 2]
    assert [r["seq"] for r in chain(sessions, bob)] == [1]


def test_fifty_concurrent_appends_make_one_unbroken_chain(database_url):
    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    alice = owner(sessions)
    start = threading.Barrier(50)
    failures: list[BaseException] = []

    def append(number: int) -> None:
        try:
            start.wait()
            with transaction(sessions) as session:
                audit.append(session, alice, AuditKind.POLICY_DECISION, "policy", f"call-{number}")
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    threads = [threading.Thread(target=append, args=(n,)) for n in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert failures == []
        records = chain(sessions, alice)
        assert [r["seq"] for r in records] == list(range(1, 51))
        assert len({r["subject"] for r in records}) == 50
        assert auditchain.verify(records).broken is None
    finally:
        engine.dispose()


def test_a_record_changed_in_the_database_is_found_and_named(sessions):
    alice = owner(sessions)
    for number in range(5):
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}",
                         {"status": "succeeded"})  # fmt: skip
    with transaction(sessions) as session:
        session.execute(
            update(AuditRecord)
            .where(AuditRecord.owner_id == alice, AuditRecord.seq == 3)
            .values(facts={"status": "failed"})
        )
    checked = auditchain.verify(chain(sessions, alice))
    assert checked.broken is not None
    assert checked.broken.seq == 3
    assert "changed after it was written" in checked.broken.reason


def test_a_record_rewritten_with_a_fresh_hash_breaks_the_next_link(sessions):
    alice = owner(sessions)
    for number in range(4):
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    records = chain(sessions, alice)
    forged = dict(records[1], subject="run-other")
    forged["hash"] = audit.Entry(
        forged["owner_id"], forged["seq"], _when(forged), forged["kind"], forged["actor"],
        forged["subject"], forged["facts"], forged["prev_hash"],
    ).digest()  # fmt: skip
    checked = auditchain.verify([records[0], forged, *records[2:]])
    assert checked.broken == auditchain.Break(3, "its prev_hash is not the hash of seq 2")


def test_a_removed_record_is_found_as_a_gap(sessions):
    alice = owner(sessions)
    for number in range(4):
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    records = chain(sessions, alice)
    del records[2]
    broken = auditchain.verify(records).broken
    assert broken is not None and broken.seq == 4 and "missing" in broken.reason


def test_trimming_the_oldest_keeps_the_rest_verifiable_and_the_chain_going(sessions):
    alice = owner(sessions)
    for number in range(4):
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    with transaction(sessions) as session:
        session.execute(
            update(AuditRecord)
            .where(AuditRecord.seq <= 2)
            .values(created_at=utcnow() - timedelta(days=400))
        )
    # The records' times were moved, not their hashed text: only the kept ones are verified.
    with transaction(sessions) as session:
        assert audit.trim(session, timedelta(days=365), limit=100) == 2
    with transaction(sessions) as session:
        audit.append(session, alice, AuditKind.RUN_ENDED, "worker", "run-4")
    records = chain(sessions, alice)
    assert [r["seq"] for r in records] == [3, 4, 5]
    assert auditchain.verify(records).broken is None


def test_facts_hold_names_and_numbers_never_objects(sessions):
    alice = owner(sessions)
    with pytest.raises(AuditError), transaction(sessions) as session:
        audit.append(session, alice, AuditKind.POLICY_DECISION, "policy", "c",
                     {"arguments": {"password": "hunter2"}})  # type: ignore[dict-item]  # fmt: skip
    assert chain(sessions, alice) == []


def _when(record: dict):
    from datetime import datetime

    return datetime.strptime(record["created_at"], "%Y-%m-%dT%H:%M:%S.%f%z")


def test_the_canonical_text_is_sorted_compact_json(sessions):
    fields = {"b": "é\n\u0001", "a": [1, True, None], "c": {"z": "x", "y": 2}}
    expected = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert auditchain.canonical(fields) == expected.encode()


def test_an_owners_last_record_stays_however_old(sessions):
    alice = owner(sessions)
    for number in range(2):
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    with transaction(sessions) as session:
        session.execute(update(AuditRecord).values(created_at=utcnow() - timedelta(days=400)))
        assert audit.trim(session, timedelta(days=365), limit=100) == 1
    with transaction(sessions) as session:
        audit.append(session, alice, AuditKind.RUN_ENDED, "worker", "run-2")
    records = chain(sessions, alice)
    assert [r["seq"] for r in records] == [2, 3]
    assert records[1]["prev_hash"] == records[0]["hash"]


def test_the_records_other_changes_will_write_join_the_chain(sessions):
    from store.auditevents import audit_enabled_override, audit_rollback, audit_trust

    alice = owner(sessions)
    with transaction(sessions) as session:
        audit_rollback(session, alice, "owner:1", "notes", "b" * 64, "a" * 64)
        audit_trust(session, alice, "owner:1", "laptop", "added", "SHA256:abc")
        audit_enabled_override(session, alice, "owner:1", "notes", "a" * 64, "unsigned")
    records = chain(sessions, alice)
    assert [r["kind"] for r in records] == [
        "skill.rolled_back", "trust.changed", "skill.enabled_override",
    ]  # fmt: skip
    assert records[0]["facts"] == {"before": "b" * 64, "after": "a" * 64}
    assert auditchain.verify(records).broken is None


def test_an_append_that_waited_for_anothers_lock_links_to_the_record_it_left(database_url):
    engine = make_engine(database_url)
    sessions = make_sessions(engine)
    alice = owner(sessions)
    with transaction(sessions) as session:
        audit.append(session, alice, AuditKind.RUN_STARTED, "worker", "first")
    waiting = threading.Event()
    second: list[BaseException] = []

    def append_second() -> None:
        try:
            waiting.set()
            with transaction(sessions) as session:
                audit.append(session, alice, AuditKind.RUN_ENDED, "worker", "third")
        except BaseException as e:  # noqa: BLE001 - reported below
            second.append(e)

    try:
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", "second")
            thread = threading.Thread(target=append_second)
            thread.start()
            waiting.wait()
            thread.join(0.5)  # it waits on the head's lock until this transaction commits
            assert thread.is_alive()
        thread.join(30)
        assert second == []
        records = chain(sessions, alice)
        assert [r["subject"] for r in records] == ["first", "second", "third"]
        assert auditchain.verify(records).broken is None
    finally:
        engine.dispose()


def test_retention_trims_a_chain_from_its_start_only(sessions):
    alice = owner(sessions)
    for number in range(5):
        with transaction(sessions) as session:
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    # Seq 3 dated before seq 2, as another host's clock may: it waits for seq 2 to be old too.
    with transaction(sessions) as session:
        session.execute(
            update(AuditRecord)
            .where(AuditRecord.owner_id == alice, AuditRecord.seq.in_([1, 3]))
            .values(created_at=utcnow() - timedelta(days=400))
        )
    with transaction(sessions) as session:
        assert audit.trim(session, timedelta(days=365), limit=100) == 1
    records = chain(sessions, alice)
    assert [r["seq"] for r in records] == [2, 3, 4, 5]


def test_retention_removes_at_most_its_limit_across_chains(sessions):
    alice, bob = owner(sessions), owner(sessions, "bob")
    for who in (alice, bob):
        for number in range(4):
            with transaction(sessions) as session:
                audit.append(session, who, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    with transaction(sessions) as session:
        session.execute(update(AuditRecord).values(created_at=utcnow() - timedelta(days=400)))
    with transaction(sessions) as session:
        assert audit.trim(session, timedelta(days=365), limit=4) == 4
    with transaction(sessions) as session:
        assert audit.trim(session, timedelta(days=365), limit=4) == 2
    assert [r["seq"] for r in chain(sessions, alice)] == [4]
    assert [r["seq"] for r in chain(sessions, bob)] == [4]


def test_a_record_reads_back_as_it_was_hashed(sessions):
    alice = owner(sessions)
    facts = {"names": ["a", "é"], "count": 3, "ok": True, "text": 'x\n"y"'}
    with transaction(sessions) as session:
        entry = audit.append(session, alice, AuditKind.SECRET_RELEASED, "node:n", "run-1", facts)
    with sessions() as session:
        record = session.scalars(select(AuditRecord)).one()
    assert audit.entry_of(record) == entry
    assert record.hash == entry.digest()


def test_the_driver_sql_writes_every_column_of_a_record():
    assert auditsql.COLUMNS == tuple(AuditRecord.__table__.columns.keys())

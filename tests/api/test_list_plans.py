"""Each database list reads its page through the index of its order: the database's own plan
(SQLite's EXPLAIN QUERY PLAN, PostgreSQL's EXPLAIN) shows that index and no sort, for the
first page, its capped count and a page after a cursor."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from factories import owner_id_of
from sqlalchemy import event, update

from api.paging import _encode, _scope
from store import audit
from store.audit import AuditKind
from store.db import transaction
from store.models import AuditRecord, utcnow

# The route, the table it pages and the index whose order it reads.
LISTS = [
    ("/api/calls", "tool_calls", "ix_tool_calls_owner_newest", "x"),
    ("/api/calls?status=failed", "tool_calls", "ix_tool_calls_owner_status_newest", "x"),
    ("/api/calls?chat=c1", "tool_calls", "ix_tool_calls_chat_newest", "x"),
    ("/api/runs", "runs", "ix_runs_owner_newest", "x"),
    ("/api/runs?status=failed", "runs", "ix_runs_owner_status_newest", "x"),
    ("/api/runs?chat=c1", "runs", "ix_runs_chat_newest", "x"),
    ("/api/approvals", "approvals", "ix_approvals_owner_newest", "x"),
    ("/api/approvals?status=pending", "approvals", "ix_approvals_owner_status_newest", "x"),
    ("/api/questions", "questions", "ix_questions_owner_newest", "x"),
    ("/api/questions?status=pending", "questions", "ix_questions_owner_status_newest", "x"),
    ("/api/chats", "chats", "ix_chats_owner_newest", 7),
    ("/api/files", "files", "ix_files_owner_newest", "x"),
]


@contextmanager
def statements_of(engine: Any) -> Iterator[list[tuple[str, Any]]]:
    """Every statement `engine` runs meanwhile, with its parameters."""
    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def plan_of(engine: Any, statement: str, parameters: Any, bitmaps: bool = True) -> str:
    """The database's plan for `statement`, as text (PostgreSQL's without bitmap scans, if
    `bitmaps` is false)."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return "\n".join(str(row[-1]) for row in rows)
        # With a handful of rows a sequential scan is cheapest: the plan at scale is the one
        # asked for here, where the planner may not scan the table whole.
        connection.exec_driver_sql("SET enable_seqscan = off")
        if not bitmaps:
            connection.exec_driver_sql("SET enable_bitmapscan = off")
        rows = connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)
        plan = "\n".join(str(row[0]) for row in rows)
        connection.rollback()
        return plan


def cursor_for(app: Any, address: str, owner: int, last_id: object) -> str:
    """The cursor the list at `address` would give after a row of an hour ago."""
    with app.test_request_context(address):
        return _encode(owner, _scope(), (utcnow() - timedelta(hours=1), last_id))


@pytest.mark.both_databases
@pytest.mark.parametrize(("address", "table", "index", "last_id"), LISTS)
def test_each_list_reads_its_page_and_count_through_the_index_of_its_order(
    app, client, auth, services, address, table, index, last_id
):
    engine = services.engine
    alice = owner_id_of(services)
    joiner = "&" if "?" in address else "?"
    cursor = cursor_for(app, address, alice, last_id)
    for query in ("page_size=5", f"page_size=5&cursor={cursor}"):
        with statements_of(engine) as seen:
            response = client.get(f"{address}{joiner}{query}", headers=auth)
        assert response.status_code == 200, response.json
        listed = [
            (statement, parameters)
            for statement, parameters in seen
            if re.search(rf"\bFROM {table}\b", statement) and "LIMIT" in statement
        ]
        # The page, and on the first page its capped count.
        assert len(listed) == (2 if "cursor" not in query else 1), listed
        for statement, parameters in listed:
            plan = plan_of(engine, statement, parameters)
            # The count needs no order: an index of the filter's will do.
            counted = statement.lstrip().startswith("SELECT count(")
            assert (f"ix_{table}_" if counted else index) in plan, (statement, plan)
            if engine.dialect.name == "sqlite":
                assert "TEMP B-TREE" not in plan, plan
                assert not re.search(rf"SCAN {table}\b(?! USING)", plan), plan
            else:
                assert "Sort" not in plan and "Seq Scan" not in plan, plan
            if counted and "chat=" in address:  # a chat's rows counted from the index alone
                only = plan_of(engine, statement, parameters, bitmaps=False)
                covering = "COVERING INDEX" if engine.dialect.name == "sqlite" else "Index Only"
                assert f"{covering} {index}" in only or f"{covering} Scan using {index}" in only, (
                    statement,
                    only,
                )
            if "cursor" in query:  # the page starts in the index, not after reading past rows
                bound = (
                    r"=\? AND \(?created_at"
                    if engine.dialect.name == "sqlite"
                    else (r"Index Cond: .*ROW\(created_at")
                )
                assert re.search(bound, plan), plan


# The audit trail's reads (api/audit.py) and retention (store/audit.py): each through the
# chain's key (`pk_audit_records`, SQLite's automatic index of it) or the subject's, never a scan
# of every owner's records nor a sort, the time filters along the chain included.
AUDIT_READS = [
    "page_size=5",
    "page_size=5&kind=run.ended",
    "page_size=5&subject=run-1",
    "page_size=5&since=2026-01-01T00:00:00Z",
    "page_size=5&until=2026-01-01T00:00:00Z",
    "page_size=5&since=2026-01-01T00:00:00Z&until=2030-01-01T00:00:00Z",
    "format=jsonl",
    "format=jsonl&since=2026-01-01T00:00:00Z",
]


def assert_audit_plan(engine: Any, statement: str, parameters: Any, index: str) -> None:
    # A few hundred records: PostgreSQL would collect the few a time or a chain's start matches
    # in a bitmap and sort them, read from the same index; the plan at scale walks that index.
    plan = plan_of(engine, statement, parameters, bitmaps=False)
    if engine.dialect.name == "sqlite":
        assert "TEMP B-TREE" not in plan, (statement, plan)
        assert not re.search(r"SCAN audit_records\b(?! USING)", plan), (statement, plan)
        sqlite_index = "sqlite_autoindex_audit_records_1" if index == "pk_audit_records" else index
        # A count may read the smaller subject index for the owner's rows: either serves it.
        assert sqlite_index in plan or "COVERING INDEX" in plan, (statement, plan)
    else:
        assert "Sort" not in plan and "Seq Scan on audit_records" not in plan, (statement, plan)
        assert index in plan or "ix_audit_records_" in plan, (statement, plan)


@pytest.mark.both_databases
@pytest.mark.parametrize("query", AUDIT_READS)
def test_the_audit_trail_reads_through_the_chains_key_or_the_subjects_index(
    client, auth, services, query
):
    index = "ix_audit_records_owner_subject_seq" if "subject" in query else "pk_audit_records"
    alice = owner_id_of(services)
    with transaction(services.sessions) as session:
        for number in range(300):  # a subject is one record of hundreds
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
    if services.engine.dialect.name == "postgresql":
        with services.engine.begin() as connection:  # the planner's figures of that
            connection.exec_driver_sql("ANALYZE audit_records")
    with statements_of(services.engine) as seen:
        response = client.get(f"/api/audit?{query}", headers=auth)
        assert response.status_code == 200, response.data  # an export is read meanwhile
        if "Link" in response.headers:  # and the next page, after its cursor
            following = response.headers["Link"].split(";")[0].strip("<>")
            assert client.get(following, headers=auth).status_code == 200
    read = [(s, p) for s, p in seen if re.search(r"\bFROM audit_records\b", s)]
    assert read, seen
    if "Link" in response.headers:
        after = [s for s, _ in read if re.search(r"\(audit_records\.seq\) < \(", s)]
        assert len(after) == 1, read
    for statement, parameters in read:
        assert_audit_plan(services.engine, statement, parameters, index)


@pytest.mark.both_databases
def test_audit_retention_walks_each_chain_from_its_start_through_its_key(services):
    alice = owner_id_of(services)
    with transaction(services.sessions) as session:
        for number in range(3):
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
        session.execute(
            update(AuditRecord)
            .where(AuditRecord.owner_id == alice, AuditRecord.seq <= 2)
            .values(created_at=utcnow() - timedelta(days=40))
        )
    with statements_of(services.engine) as seen, transaction(services.sessions) as session:
        assert audit.trim(session, timedelta(days=30), limit=100) == 2
    touching = [(s, p) for s, p in seen if "audit_records" in s]
    assert len(touching) == 3, touching  # the chains to trim, one chain's start, its DELETE
    for statement, parameters in touching:
        assert_audit_plan(services.engine, statement, parameters, "pk_audit_records")

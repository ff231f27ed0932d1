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
from sqlalchemy import event

from api.paging import _encode, _scope
from store.models import utcnow

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


def plan_of(engine: Any, statement: str, parameters: Any) -> str:
    """The database's plan for `statement`, as text."""
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return "\n".join(str(row[-1]) for row in rows)
        # With a handful of rows a sequential scan is cheapest: the plan at scale is the one
        # asked for here, where the planner may not scan the table whole.
        connection.exec_driver_sql("SET enable_seqscan = off")
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
            if "cursor" in query:  # the page starts in the index, not after reading past rows
                bound = (
                    r"=\? AND \(?created_at"
                    if engine.dialect.name == "sqlite"
                    else (r"Index Cond: .*ROW\(created_at")
                )
                assert re.search(bound, plan), plan

"""`skillfleet audit export|verify`, run as a user runs them against a served API: a whole chain
verifies, and a record changed in the database on purpose is found and named."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fleet import LiveServer
from sqlalchemy import select, update
from test_up import SKILLFLEET, clean_env

from store import audit
from store.audit import AuditKind
from store.db import transaction
from store.models import AuditRecord, Owner

CLI_LIMIT = 60.0


@pytest.fixture
def served(app: Any) -> Iterator[LiveServer]:
    server = LiveServer(app)
    yield server
    server.stop()


@pytest.fixture
def alice(services: Any, token: str) -> int:
    with transaction(services.sessions) as session:
        found = session.scalar(select(Owner.id).where(Owner.name == "alice"))
        assert found is not None
        for number in range(1, 6):
            audit.append(session, found, AuditKind.RUN_ENDED, "worker", f"run-{number}",
                         {"status": "succeeded"})  # fmt: skip
        return found


def run_audit(served: LiveServer, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(SKILLFLEET_URL=served.url, SKILLFLEET_TOKEN=token)
    return subprocess.run(
        [SKILLFLEET, "audit", *args], env=env, capture_output=True, text=True, timeout=CLI_LIMIT
    )


def test_verify_says_the_whole_chain_holds(served, token, alice):
    checked = run_audit(served, token, "verify")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("The audit chain holds: 5 records, seq 1 to 5;")


def test_a_record_changed_on_purpose_is_found_and_named(served, token, alice, services):
    with transaction(services.sessions) as session:
        session.execute(
            update(AuditRecord)
            .where(AuditRecord.owner_id == alice, AuditRecord.seq == 4)
            .values(facts={"status": "failed"})
        )
    checked = run_audit(served, token, "verify")
    assert checked.returncode == 1
    assert checked.stderr == (
        "The audit chain is broken at seq 4: its content does not match its hash: it was "
        "changed after it was written.\nRecords up to seq 3 hold.\n"
    )


def test_export_writes_json_lines_that_verify_offline(served, token, alice, tmp_path: Path):
    saved = tmp_path / "audit.jsonl"
    exported = run_audit(served, token, "export", "-o", str(saved))
    assert exported.returncode == 0, exported.stderr
    lines = saved.read_text().splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2, 3, 4, 5]
    assert run_audit(served, token, "verify", "--file", str(saved)).returncode == 0
    record = json.loads(lines[1])
    record["subject"] = "run-other"
    lines[1] = json.dumps(record)
    saved.write_text("\n".join(lines) + "\n")
    checked = run_audit(served, token, "verify", "--file", str(saved))
    assert checked.returncode == 1 and "broken at seq 2" in checked.stderr


def test_a_removed_record_is_named_as_a_gap(served, token, alice, services):
    with transaction(services.sessions) as session:
        session.execute(
            AuditRecord.__table__.delete().where(
                AuditRecord.owner_id == alice, AuditRecord.seq == 2
            )
        )
    checked = run_audit(served, token, "verify")
    assert checked.returncode == 1
    assert "broken at seq 3: seq 3 follows seq 1" in checked.stderr


def test_an_agent_token_is_told_it_may_not(served, agent_token, alice):
    checked = run_audit(served, agent_token, "verify")
    assert checked.returncode == 1 and "Error (owner_only)" in checked.stderr

"""Housekeeping's sweep works in bounded batches: a backlog goes a batch per transaction, a
bounded number of them a round, and the next round goes on with what is left."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from factories import owner_id_of
from sqlalchemy import func, select, update

from store import audit, auditchain
from store.audit import AuditKind
from store.db import transaction
from store.models import Approval, AuditRecord, ToolCall, TurnCount, utcnow
from store.states import ApprovalStatus
from workers.housekeeping import sweep


def backlog(services, owner: int, turns: int, approvals: int) -> None:
    """Turn counts of two days ago and pending approvals that expired an hour ago."""
    old, now = utcnow() - timedelta(days=2), utcnow()
    calls, asked = [], []
    for _ in range(approvals):
        call_id, approval_id = str(uuid.uuid4()), str(uuid.uuid4())
        calls.append({"id": call_id, "owner_id": owner, "tool": "run_skill_script",
                      "tier": "destructive", "status": "pending_approval",
                      "approval_id": approval_id, "created_at": now})  # fmt: skip
        asked.append({"id": approval_id, "owner_id": owner, "call_id": call_id,
                      "tool": "run_skill_script", "tier": "destructive", "arguments": {},
                      "warning": "", "status": "pending", "created_at": now,
                      "expires_at": now - timedelta(hours=1)})  # fmt: skip
    with transaction(services.sessions) as session:
        session.execute(
            TurnCount.__table__.insert(),
            [{"owner_id": owner, "turn": f"t{n}", "calls": 1, "created_at": old}
             for n in range(turns)],
        )  # fmt: skip
        session.execute(ToolCall.__table__.insert(), calls)
        session.execute(Approval.__table__.insert(), asked)


def left(services, owner: int) -> tuple[int, int]:
    """The owner's backlog still there: its turn counts (a day old or more) and its approvals
    still pending (other tests' rows are not this one's)."""
    with services.sessions() as session:
        turns = session.scalar(
            select(func.count())
            .select_from(TurnCount)
            .where(TurnCount.owner_id == owner, TurnCount.created_at < utcnow() - timedelta(days=1))
        )
        pending = session.scalar(
            select(func.count())
            .select_from(Approval)
            .where(Approval.owner_id == owner, Approval.status == "pending")
        )
    return turns, pending


@pytest.mark.both_databases
def test_a_backlog_goes_in_bounded_batches_over_rounds(services, token):
    alice = owner_id_of(services)
    backlog(services, alice, turns=25, approvals=23)
    sent: list[str] = []
    assert sweep(services.sessions, sent.append, batch=5, batches=3) == 15
    assert left(services, alice) == (10, 8)
    assert sweep(services.sessions, sent.append, batch=5, batches=3) == 8
    assert left(services, alice) == (0, 0)
    assert sweep(services.sessions, sent.append, batch=5, batches=3) == 0
    with services.sessions() as session:
        states = set(session.scalars(select(Approval.status).where(Approval.owner_id == alice)))
        calls = set(session.scalars(select(ToolCall.status).where(ToolCall.owner_id == alice)))
    assert states == {ApprovalStatus.EXPIRED} and calls == {"expired"}


@pytest.mark.both_databases
def test_the_sweep_removes_audit_records_past_their_own_retention_only(services, token):
    alice = owner_id_of(services)
    with transaction(services.sessions) as session:
        for number in range(7):
            audit.append(session, alice, AuditKind.RUN_ENDED, "worker", f"run-{number}")
        session.execute(
            update(AuditRecord)
            .where(AuditRecord.owner_id == alice, AuditRecord.seq <= 5)
            .values(created_at=utcnow() - timedelta(days=40))
        )
    sweep(services.sessions, [].append, batch=2, batches=10, audit_retention=timedelta(days=400))
    assert kept_seqs(services, alice) == list(range(1, 8))  # within the long default: all kept
    sweep(services.sessions, [].append, batch=2, batches=10, audit_retention=timedelta(days=30))
    assert kept_seqs(services, alice) == [6, 7]
    with services.sessions() as session:
        rows = session.scalars(select(AuditRecord).order_by(AuditRecord.seq))
        kept = [audit.exported(row) for row in rows]
    # Verified from the first kept record, whose prev_hash is taken as given.
    assert auditchain.verify(kept).broken is None


def kept_seqs(services, owner: int) -> list[int]:
    with services.sessions() as session:
        found = session.scalars(
            select(AuditRecord.seq).where(AuditRecord.owner_id == owner).order_by(AuditRecord.seq)
        )
        return list(found)

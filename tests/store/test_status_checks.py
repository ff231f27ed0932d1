"""The database holds every status column to its machine's states (a CHECK constraint from the
migrations), and the writers in store/lifecycle/ move rows only along their tables."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy.exc
from sqlalchemy import select, text

from store.db import SessionFactory, core_transaction, make_engine, make_sessions, transaction
from store.lifecycle import approvals, calls, editplans, jobruns, questions, runs, turns
from store.migrate import downgrade, upgrade
from store.models import Approval, EditPlan, Job, Owner, Run, utcnow
from store.states import (
    MACHINES,
    ApprovalStatus,
    CallStatus,
    EditPlanStatus,
    IllegalTransition,
    RunStatus,
    TurnStatus,
)

pytestmark = pytest.mark.both_databases  # each dialect enforces the constraint itself
OUTPUT = {"exit_code": 0, "stdout": "", "stderr": "", "error": None, "isolation": None}


@pytest.fixture
def sessions(database_url: str) -> SessionFactory:
    return make_sessions(make_engine(database_url))


def _one_row_each(sessions: SessionFactory) -> dict[str, str]:
    """A row in every table with a status, as each writer makes it: table -> row id."""
    with transaction(sessions) as session:
        owner = Owner(name=f"o-{uuid.uuid4().hex[:8]}")
        session.add(owner)
        session.flush()
        call = calls.new({"id": str(uuid.uuid4()), "owner_id": owner.id, "tool": "edit_skill",
                          "tier": "change", "mode": "execute"})  # fmt: skip
        calls.record(session, call, CallStatus.PENDING_APPROVAL)
        session.flush()
        now = utcnow()
        approval = approvals.new(
            id=str(uuid.uuid4()), owner_id=owner.id, call_id=call.id, tool="edit_skill",
            tier="change", arguments={}, warning="", created_at=now,
            expires_at=now + timedelta(minutes=30),
        )  # fmt: skip
        plan = editplans.new(
            id=str(uuid.uuid4()), owner_id=owner.id, call_id=call.id, approval_id=approval.id,
            skill_name="s", base_hash="0" * 64, changes={"files": {}}, diff="",
            lint_warnings=[], rationale="", created_at=now, expires_at=now + timedelta(hours=2),
        )  # fmt: skip
        question = questions.new(
            id=str(uuid.uuid4()), owner_id=owner.id, call_id=call.id, kind="question",
            text="Which one?", created_at=now, expires_at=now + timedelta(minutes=30),
        )  # fmt: skip
        run = _new_run(owner.id)
        job = Job(id=str(uuid.uuid4()), owner_id=owner.id, name="j", cron="* * * * *",
                  time_zone="UTC", steps=[])  # fmt: skip
        session.add_all([approval, plan, question, run, job])
        session.flush()
        job_run = jobruns.queue(session, job, jobruns.MANUAL)
        turn = turns.create(session, owner.id, "Hello.", chat_id="c1")
        return {"tool_calls": call.id, "approvals": approval.id, "edit_plans": plan.id,
                "runs": run.id, "job_runs": job_run.id, "turns": turn.id,
                "questions": question.id}  # fmt: skip


def _new_run(owner_id: int) -> Run:
    return runs.new({"id": str(uuid.uuid4()), "owner_id": owner_id, "skill_name": "s",
                     "skill_hash": "0" * 64, "script": "scripts/a.py", "arguments": {},
                     "execution": "node", "queue": "node.web01", "node": "web01",
                     "timeout_seconds": 60, "created_at": utcnow()})  # fmt: skip


def _set(sessions: SessionFactory, table: str, row_id: str, status: str) -> None:
    with transaction(sessions) as session:
        session.execute(
            text(f"UPDATE {table} SET status = :status WHERE id = :id"),
            {"status": status, "id": row_id},
        )


def test_the_database_refuses_a_status_no_machine_knows(sessions: SessionFactory):
    rows = _one_row_each(sessions)
    assert set(rows) == {machine.table for machine in MACHINES}
    for table, row_id in rows.items():
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            _set(sessions, table, row_id, "finished")


def test_the_database_takes_every_state_of_each_machine(sessions: SessionFactory):
    rows = _one_row_each(sessions)
    for machine in MACHINES:
        for state in machine.states:
            _set(sessions, machine.table, rows[machine.table], state)
        with sessions() as session:
            stored = session.scalar(
                text(f"SELECT status FROM {machine.table} WHERE id = :id"),
                {"id": rows[machine.table]},
            )
        assert stored == list(machine.states)[-1]


def test_a_finished_run_is_never_claimed_or_finished_again(sessions: SessionFactory):
    with transaction(sessions) as session:
        owner = Owner(name=f"o-{uuid.uuid4().hex[:8]}")
        session.add(owner)
        session.flush()
        run = _new_run(owner.id)
        session.add(run)
    with core_transaction(sessions) as connection:
        assert runs.claim(connection, run.id, "node@a:1:1")
        ended = runs.finish(connection, run.id, RunStatus.SUCCEEDED, OUTPUT)
        assert ended[0]["status"] == "succeeded"
    with core_transaction(sessions) as connection:
        assert runs.claim(connection, run.id, "node@b:1:1") == []
        assert runs.finish(connection, run.id, RunStatus.FAILED, OUTPUT) == []
        with pytest.raises(IllegalTransition):
            runs.finish(connection, run.id, RunStatus.RUNNING, {})
    with transaction(sessions) as session:
        assert not runs.cancel_queued(session, run.id)
        assert runs.abandon(session, run.id, "gone") is None
    with sessions() as session:
        assert session.scalar(select(Run.status).where(Run.id == run.id)) == "succeeded"


def test_an_answered_call_is_not_answered_again(sessions: SessionFactory):
    rows = _one_row_each(sessions)
    call_id = rows["tool_calls"]
    with transaction(sessions) as session:
        assert calls.answer(session, call_id, CallStatus.DENIED, error=("owner_denied", "No."))
    with transaction(sessions) as session:
        assert not calls.answer(session, call_id, CallStatus.RUNNING)
        assert not calls.answer(session, call_id, CallStatus.DONE)


def test_a_job_run_and_a_turn_that_ended_stay_ended(sessions: SessionFactory):
    rows = _one_row_each(sessions)
    with transaction(sessions) as session:
        claimed = jobruns.claim(session, rows["job_runs"], "control@a:1:1")
        assert claimed is not None and jobruns.succeed(session, claimed, "control@a:1:1")
    with transaction(sessions) as session:
        assert jobruns.claim(session, rows["job_runs"], "control@b:1:1") is None
        assert jobruns.interrupt(session, rows["job_runs"], "control@a:1:1", "gone") is None
    with transaction(sessions) as session:
        assert turns.stop_queued(session, rows["turns"])
    with transaction(sessions) as session:
        assert turns.claim(session, rows["turns"], "control@a:1:1") is None
        assert not turns.finish(session, rows["turns"], TurnStatus.SUCCEEDED, "Hi.", 0)


def test_upgrading_to_the_status_checks_keeps_the_rows_already_there(database_url, sessions):
    # Rows made as today's writers make them, then the schema taken back to before the checks
    # (the models are today's, so rows can't be made on the old schema itself).
    rows = _one_row_each(sessions)
    machines = [machine for machine in MACHINES if machine.table != "questions"]  # from 0012
    # The last end each table knew then (an approval's `withdrawn` came with 0019).
    ends = {m.table: next(e for e in reversed(m.ends) if e != "withdrawn") for m in machines}
    downgrade(database_url, "0010")
    try:
        for machine in machines:
            _set(sessions, machine.table, rows[machine.table], ends[machine.table])
    finally:
        upgrade(database_url)
    for machine in machines:
        with sessions() as session:
            stored = session.scalar(
                text(f"SELECT status FROM {machine.table} WHERE id = :id"),
                {"id": rows[machine.table]},
            )
        assert stored == ends[machine.table]
        with pytest.raises(sqlalchemy.exc.IntegrityError):
            _set(sessions, machine.table, rows[machine.table], "finished")


def test_an_approval_is_claimed_by_one_answer_and_an_answered_one_stays_answered(sessions):
    rows = _one_row_each(sessions)
    approval_id = rows["approvals"]
    with transaction(sessions) as session:
        assert approvals.claim(session, approval_id)
        assert not approvals.claim(session, approval_id)  # the second answer finds it taken
        approval = session.get(Approval, approval_id)
        assert approval is not None
        approvals.move(approval, ApprovalStatus.DENIED)
    with transaction(sessions) as session:
        approval = session.get(Approval, approval_id)
        assert approval is not None and approval.status == "denied"
        with pytest.raises(IllegalTransition, match="approval that is denied can't become"):
            approvals.move(approval, ApprovalStatus.APPROVED)
        assert not approvals.expire_pending(session, approval_id, utcnow())


def test_an_edit_plan_ends_once(sessions):
    rows = _one_row_each(sessions)
    with transaction(sessions) as session:
        editplans.finish(session, rows["edit_plans"], EditPlanStatus.APPLIED, "1" * 64)
    with transaction(sessions) as session:
        editplans.settle(session, rows["approvals"], EditPlanStatus.DENIED)
        editplans.finish(session, rows["edit_plans"], EditPlanStatus.FAILED, None)
    with sessions() as session:
        plan = session.get(EditPlan, rows["edit_plans"])
    assert plan is not None and (plan.status, plan.applied_hash) == ("applied", "1" * 64)
    with transaction(sessions) as session, pytest.raises(IllegalTransition):
        editplans.settle(session, rows["approvals"], EditPlanStatus.PENDING)

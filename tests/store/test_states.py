"""The state machines' tables: each allows exactly the moves it lists and refuses the rest."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import pytest

from store.states import (
    APPROVALS,
    CALLS,
    EDIT_PLANS,
    JOB_RUNS,
    MACHINES,
    RUNS,
    TURNS,
    ApprovalStatus,
    CallStatus,
    EditPlanStatus,
    IllegalTransition,
    JobRunStatus,
    RunStatus,
    TurnStatus,
    check,
    diagram,
    diagrams,
)


def test_a_finished_run_cannot_go_back_to_running_or_end_again():
    for end in RUNS.ends:
        with pytest.raises(IllegalTransition, match=f"A run that is {end} can't become running"):
            RUNS.check(end, RunStatus.RUNNING)
        assert not RUNS.allows(end, RunStatus.FAILED)


def test_a_running_run_cannot_be_queued_again_and_a_queued_one_cannot_succeed():
    assert not RUNS.allows(RunStatus.RUNNING, RunStatus.QUEUED)
    assert not RUNS.allows(RunStatus.QUEUED, RunStatus.SUCCEEDED)
    assert RUNS.sources(RunStatus.CANCELLED) == (RunStatus.QUEUED, RunStatus.RUNNING)
    assert RUNS.sources(RunStatus.SUCCEEDED) == (RunStatus.RUNNING,)


def test_an_ended_call_cannot_be_answered_again_and_a_running_one_is_not_denied():
    for end, new in product(CALLS.ends, CallStatus):
        assert not CALLS.allows(end, new)
    assert not CALLS.allows(CallStatus.RUNNING, CallStatus.DENIED)
    assert not CALLS.allows(CallStatus.RUNNING, CallStatus.EXPIRED)
    assert CALLS.allows(CallStatus.PENDING_APPROVAL, CallStatus.EXPIRED)


def test_a_job_run_waits_only_while_running_and_a_skipped_one_never_moves():
    assert JOB_RUNS.sources(JobRunStatus.WAITING) == (JobRunStatus.RUNNING,)
    assert JOB_RUNS.allows(JobRunStatus.WAITING, JobRunStatus.RUNNING)
    assert not JOB_RUNS.allows(JobRunStatus.QUEUED, JobRunStatus.WAITING)
    assert JobRunStatus.SKIPPED in JOB_RUNS.ends and JobRunStatus.SKIPPED in JOB_RUNS.initial


def test_a_turn_stopped_or_ended_stays_so():
    for end, new in product(TURNS.ends, TurnStatus):
        with pytest.raises(IllegalTransition):
            TURNS.check(end, new)


def test_an_approval_is_answered_only_after_one_answer_claimed_it():
    assert not APPROVALS.allows(ApprovalStatus.PENDING, ApprovalStatus.APPROVED)
    assert APPROVALS.sources(ApprovalStatus.ANSWERING) == (ApprovalStatus.PENDING,)
    assert APPROVALS.allows(ApprovalStatus.APPROVED, ApprovalStatus.STALE)
    assert not APPROVALS.allows(ApprovalStatus.DENIED, ApprovalStatus.APPROVED)


def test_an_edit_plan_ends_once_from_pending():
    for end, new in product(EDIT_PLANS.ends, EditPlanStatus):
        assert not EDIT_PLANS.allows(end, new)
    assert EDIT_PLANS.open == (EditPlanStatus.PENDING,)


def test_a_state_nothing_moves_to_has_no_sources_and_rows_start_only_where_listed():
    with pytest.raises(IllegalTransition, match="No tool call may move to deciding"):
        CALLS.sources(CallStatus.DECIDING)
    with pytest.raises(IllegalTransition, match="A run is never created running"):
        RUNS.created(RunStatus.RUNNING)
    with pytest.raises(ValueError):
        RUNS.check("finished", RunStatus.RUNNING)  # not a state at all


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.table)
def test_every_state_is_reached_from_where_rows_start_and_every_open_state_can_end(machine):
    reached = set(machine.initial)
    while True:
        more = {new for old in reached for new in machine.moves.get(old, ())} - reached
        if not more:
            break
        reached |= more
    assert reached == set(machine.states)
    for state in machine.open:
        seen, todo = {state}, [state]
        while todo:
            for new in machine.moves.get(todo.pop(), ()):
                if new not in seen:
                    seen.add(new)
                    todo.append(new)
        ends = seen & set(machine.ends)
        assert ends, f"{machine.name} {state} can never end"


def test_the_check_constraint_lists_every_state():
    assert check(RunStatus) == (
        "status IN ('queued', 'running', 'succeeded', 'failed', 'timed_out', 'cancelled', "
        "'interrupted')"
    )


def test_the_architecture_doc_shows_the_state_machines_as_the_tables_have_them():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "architecture.md").read_text("utf-8")
    start = doc.index("<!-- state machines: generated from store/states.py -->\n")
    end = doc.index("\n<!-- end of state machines -->")
    shown = doc[start:end].split("\n", 1)[1]
    assert shown == diagrams(), (
        'Regenerate with: python -c "from store.states import diagrams; print(diagrams())"'
    )


def test_a_diagram_draws_every_move_of_its_table():
    drawn = diagram(RUNS).splitlines()
    assert drawn[:2] == ["stateDiagram-v2", "    [*] --> queued"]
    assert "    succeeded --> running" not in drawn
    moves = sum(len(targets) for targets in RUNS.moves.values())
    assert len([line for line in drawn if "[*]" not in line]) - 1 == moves

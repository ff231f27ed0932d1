"""What a task reports to Celery (and so to Flower) for each end of its run, job run or turn,
read back from the real database: every end that is not a success fails the task, naming
the id; a delivery that ran nothing reports the end it found."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from factories import finished_run, owner_id_of

from store.db import SessionFactory, transaction
from store.models import Job, JobRun, Run, Turn
from store.states import JOB_RUNS, RUNS, TURNS, Machine
from workers.outcomes import NotSucceeded, failing, report

FAILING = {
    Run: {"failed", "timed_out", "cancelled", "interrupted"},
    JobRun: {"failed", "unanswered", "interrupted"},
    Turn: {"failed", "stopped", "timed_out", "interrupted"},
}


@pytest.fixture
def sessions(services: Any) -> SessionFactory:
    return services.sessions  # type: ignore[no-any-return]


@pytest.fixture
def make(services: Any, sessions: SessionFactory) -> Callable[[type, str], str]:
    """Save a run, job run or turn in `status` (with a reason, as its writer leaves it)."""
    owner = owner_id_of(services)

    def build(row: type, status: str) -> str:
        key = str(uuid.uuid4())
        with transaction(sessions) as session:
            if row is Run:
                run = finished_run(owner, "0" * 64, key, status)
                run.exit_code = 3 if status == "failed" else run.exit_code
                session.add(run)
            elif row is JobRun:
                job = Job(id=str(uuid.uuid4()), owner_id=owner, name="n", cron="0 3 * * *",
                          time_zone="UTC", steps=[{"tool": "list_skills"}])  # fmt: skip
                session.add(job)
                session.flush()
                session.add(JobRun(id=key, job_id=job.id, owner_id=owner, trigger="manual",
                                   status=status, steps=[], error_code="denied"))  # fmt: skip
            else:
                session.add(Turn(id=key, owner_id=owner, prompt="p", status=status,
                                 error_code="model_failed"))  # fmt: skip
        return key

    return build


def test_the_failing_ends_are_every_end_but_a_success():
    machines: dict[type, Machine[Any]] = {Run: RUNS, JobRun: JOB_RUNS, Turn: TURNS}
    assert {row: set(failing(machine)) for row, machine in machines.items()} == FAILING


def cases() -> Iterator[tuple[type, str]]:
    for row, ends in FAILING.items():
        for status in sorted(ends):
            yield row, status


@pytest.mark.parametrize(("row", "status"), list(cases()))
def test_an_end_that_is_not_a_success_fails_the_task_naming_the_id(make, sessions, row, status):
    key = make(row, status)
    with pytest.raises(NotSucceeded) as raised:
        report(sessions, row, key, status)
    assert key in str(raised.value) and f"ended {status}" in str(raised.value)


def test_the_reason_is_the_run_s_exit_code_or_the_error_s_code(make, sessions):
    run, job_run = make(Run, "failed"), make(JobRun, "unanswered")
    with pytest.raises(NotSucceeded, match=r"^run \S+ ended failed \(exit code 3\)\.$"):
        report(sessions, Run, run, "failed")
    with pytest.raises(NotSucceeded, match=r"^job run \S+ ended unanswered \(denied\)\.$"):
        report(sessions, JobRun, job_run, "unanswered")


@pytest.mark.parametrize("row", [Run, JobRun, Turn])
def test_a_success_is_the_task_s_result(make, sessions, row):
    assert report(sessions, row, make(row, "succeeded"), "succeeded") == "succeeded"


def test_a_job_run_left_waiting_for_the_owner_is_a_success(make, sessions):
    assert report(sessions, JobRun, make(JobRun, "waiting"), "waiting") == "waiting"


def test_a_delivery_that_ran_nothing_reports_the_end_it_found(make, sessions):
    cancelled = make(Run, "cancelled")
    with pytest.raises(NotSucceeded, match="had already ended cancelled; this delivery ran noth"):
        report(sessions, Run, cancelled, None)
    assert report(sessions, Run, make(Run, "running"), None) is None  # still running elsewhere
    assert report(sessions, Run, make(Run, "succeeded"), None) is None
    assert report(sessions, Run, str(uuid.uuid4()), None) is None  # never saved


def test_a_failing_end_whose_row_is_gone_still_fails_the_task(sessions):
    gone = str(uuid.uuid4())
    with pytest.raises(NotSucceeded, match=f"^turn {gone} ended timed_out\\.$"):
        report(sessions, Turn, gone, "timed_out")

"""What a change notes for the owner's event feed, on the session that makes it.

The notes wait in `session.info` until the session commits; relay/feed.py then publishes them
to the owner's stream (and forgets them on a rollback). Writers on a bare connection collect
`OwnerEvent`s in a list instead and publish them once committed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from store.models import Approval, RunFacts
from store.states import ApprovalStatus

# What a session holds until it commits: (owner id, kind, data or a snapshot to take then).
NOTED = "skillfleet.owner_events"
Snapshot = Callable[[], dict[str, Any]]
OwnerEvent = tuple[int, str, dict[str, Any]]


def note(
    session: Session, owner_id: int | None, kind: str, data: dict[str, Any] | Snapshot
) -> None:
    """Publish an event once `session` commits; a callable `data` is read just before commit."""
    if owner_id is not None:
        session.info.setdefault(NOTED, []).append((owner_id, kind, data))


def note_approval(session: Session, approval: Approval) -> None:
    """The approval's state as it is when the session commits: created, or answered."""

    def snapshot() -> dict[str, Any]:
        return {
            "approval_id": approval.id,
            "call_id": approval.call_id,
            "status": approval.status,
            "tool": approval.tool,
            "tier": approval.tier,
            "skill_name": approval.skill_name,
            "node": approval.node,
        }

    kind = "approval.created" if approval.status == ApprovalStatus.PENDING else "approval.answered"
    note(session, approval.owner_id, kind, snapshot)


def note_run(session: Session, run: RunFacts) -> None:
    """A run moved to a new state."""
    note(session, run.owner_id, *run_state(run))


def add_run_state(events: list[OwnerEvent], run: RunFacts) -> None:
    """The event of a run's new state, for a caller that publishes its events itself."""
    if run.owner_id is not None:
        events.append((run.owner_id, *run_state(run)))


def run_state(run: RunFacts) -> tuple[str, dict[str, Any]]:
    """The kind and data of the event saying a run moved to its current state."""
    data = {
        "run_id": run.id,
        "call_id": run.call_id,
        "status": run.status,
        "skill_name": run.skill_name,
        "node": run.node,
        "exit_code": run.exit_code,
    }
    return "run.state", data


def note_job_run(session: Session, owner_id: int, job_id: str, run_id: str, status: str) -> None:
    """A job run was queued, skipped or moved to a new state."""
    data = {"job_run_id": run_id, "job_id": job_id, "status": str(status)}
    note(session, owner_id, "job_run.state", data)

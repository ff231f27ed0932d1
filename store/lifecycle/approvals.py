"""An approval's state: the one writer of `approvals.status`.

    pending -> answering -> approved | approved_for_chat | denied | stale
    pending -> expired                             (nobody answered in time)
    pending -> withdrawn                           (the agent stopped waiting for the answer)
    approved | approved_for_chat -> stale          (the skill moved before the call ran)

Answering starts with one conditional UPDATE (`claim`), so of two answers racing exactly one
goes on; the rest are moves of the approval the claim locked.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from store.models import Approval, utcnow
from store.states import APPROVALS, ApprovalStatus

# What each decision of the owner makes of the approval.
ANSWERED = {
    "approve": ApprovalStatus.APPROVED,
    "approve_for_chat": ApprovalStatus.APPROVED_FOR_CHAT,
    "deny": ApprovalStatus.DENIED,
}


def new(**values: Any) -> Approval:
    """A pending approval (not added to a session yet)."""
    return Approval(status=APPROVALS.created(ApprovalStatus.PENDING), **values)


def claim(session: Session, approval_id: str) -> bool:
    """pending -> answering; False when another answer (or the expiry) came first."""
    claimed = session.execute(
        update(Approval)
        .where(Approval.id == approval_id, Approval.status == ApprovalStatus.PENDING)
        .values(status=APPROVALS.check(ApprovalStatus.PENDING, ApprovalStatus.ANSWERING))
    )
    return int(claimed.rowcount) == 1  # type: ignore[attr-defined]


def move(approval: Approval, status: ApprovalStatus, at: datetime | None = None) -> None:
    """Move an approval the caller holds locked (claimed, or selected for update)."""
    approval.status = APPROVALS.check(approval.status, status)
    approval.answered_at = at or utcnow()


def expire_pending(session: Session, approval_id: str, at: datetime) -> bool:
    """pending -> expired by id; False when it was no longer pending."""
    claimed = session.execute(
        update(Approval)
        .where(Approval.id == approval_id, Approval.status == ApprovalStatus.PENDING)
        .values(status=APPROVALS.check(ApprovalStatus.PENDING, ApprovalStatus.EXPIRED))
        .values(answered_at=at)
    )
    return int(claimed.rowcount) == 1  # type: ignore[attr-defined]


def withdraw_pending(session: Session, approval_id: str, at: datetime) -> bool:
    """pending -> withdrawn by id; False when it was no longer pending (an answer came first)."""
    claimed = session.execute(
        update(Approval)
        .where(Approval.id == approval_id, Approval.status == ApprovalStatus.PENDING)
        .values(status=APPROVALS.check(ApprovalStatus.PENDING, ApprovalStatus.WITHDRAWN))
        .values(answered_at=at)
    )
    return int(claimed.rowcount) == 1  # type: ignore[attr-defined]


def void(session: Session, approval: Approval) -> None:
    """approved -> stale: the approved call could not run because its skill moved meanwhile."""
    status = APPROVALS.check(approval.status, ApprovalStatus.STALE)
    session.execute(update(Approval).where(Approval.id == approval.id).values(status=status))
    approval.status = status

"""An edit plan's state: the one writer of `edit_plans.status`.

    pending -> applied | denied | stale | failed | expired

A plan is held pending with its approval; each end is one conditional UPDATE from pending, so
an answer and the expiry never both end it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from store.models import EditPlan, utcnow
from store.states import EDIT_PLANS, EditPlanStatus

PENDING = EditPlanStatus.PENDING


def new(**values: Any) -> EditPlan:
    """A pending plan (not added to a session yet)."""
    return EditPlan(status=EDIT_PLANS.created(PENDING), **values)


def expire(plan: EditPlan) -> None:
    """pending -> expired, for a plan the caller holds locked."""
    plan.status = EDIT_PLANS.check(plan.status, EditPlanStatus.EXPIRED)
    plan.answered_at = utcnow()


def sweep(session: Session, owner_id: int) -> None:
    """The owner's pending plans past their time -> expired (their answered_at stays unset)."""
    session.execute(
        update(EditPlan)
        .where(
            EditPlan.owner_id == owner_id,
            EditPlan.status == PENDING,
            EditPlan.expires_at <= utcnow(),
        )
        .values(status=EDIT_PLANS.check(PENDING, EditPlanStatus.EXPIRED))
        .execution_options(synchronize_session=False)
    )


def settle(session: Session, approval_id: str, status: EditPlanStatus) -> None:
    """End the pending plan of an approval (no-op for approvals of other tools)."""
    session.execute(
        update(EditPlan)
        .where(EditPlan.approval_id == approval_id, EditPlan.status == PENDING)
        .values(status=EDIT_PLANS.check(PENDING, status), answered_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def finish(session: Session, plan_id: str, status: EditPlanStatus, new_hash: str | None) -> None:
    """pending -> applied or failed, once the approved plan was written (or could not be)."""
    session.execute(
        update(EditPlan)
        .where(EditPlan.id == plan_id, EditPlan.status == PENDING)
        .values(status=EDIT_PLANS.check(PENDING, status), applied_hash=new_hash)
        .values(answered_at=utcnow())
    )

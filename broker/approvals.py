"""Approvals: the owner's answer to exactly one call, which expires after 30 minutes."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.classify import CallPlan
from broker.editplans import refuse_expired
from broker.errors import ApprovalAnswered, ApprovalNotFound
from broker.warnings import warning_for
from store import ownerevents
from store.lifecycle import approvals, calls
from store.models import Approval, ToolCall, utcnow
from store.states import ApprovalStatus, CallStatus

APPROVAL_LIFE = timedelta(minutes=30)
PENDING = ApprovalStatus.PENDING
DECISIONS = tuple(approvals.ANSWERED)


def create_approval(session: Session, call: ToolCall, plan: CallPlan, rule: str | None) -> Approval:
    """A pending approval bound to this call's tool, arguments, full skill hash and node."""
    now = utcnow()
    approval = approvals.new(
        id=str(uuid.uuid4()),
        owner_id=call.owner_id,
        call_id=call.id,
        chat_id=call.chat_id,
        job_run_id=call.job_run_id,
        tool=plan.tool.name,
        tier=plan.tier,
        arguments=plan.arguments,
        skill_name=plan.skill.name if plan.skill else None,
        skill_hash=plan.skill.hash if plan.skill else None,
        node=plan.node,
        grant_key=plan.grant_key,
        rule=rule,
        warning=warning_for(plan),
        offers_chat_grant=plan.offers_grant(in_job=call.job_run_id is not None),
        created_at=now,
        expires_at=now + APPROVAL_LIFE,
    )
    session.add(approval)
    ownerevents.note_approval(session, approval)
    return approval


def expire_due(session: Session, owner_id: int | None = None) -> int:
    """Mark pending approvals past their time `expired`, and their calls too."""
    now = utcnow()
    query = select(Approval).where(Approval.status == PENDING, Approval.expires_at <= now)
    if owner_id is not None:
        query = query.where(Approval.owner_id == owner_id)
    expired = list(session.scalars(query.with_for_update(skip_locked=True)))
    for approval in expired:
        approvals.move(approval, ApprovalStatus.EXPIRED, now)
        ownerevents.note_approval(session, approval)
        calls.answer(
            session,
            approval.call_id,
            CallStatus.EXPIRED,
            error=("approval_expired", "Nobody answered the approval within 30 minutes."),
        )
    return len(expired)


def claim_for_answer(session: Session, owner_id: int, approval_id: str) -> Approval:
    """The owner's pending approval, locked for answering; 404 for others', 409 if answered."""
    expire_due(session, owner_id)
    approval = session.scalar(select(Approval).where(Approval.id == approval_id).with_for_update())
    if approval is None or approval.owner_id != owner_id:
        raise ApprovalNotFound(f"You have no approval '{approval_id}'.")
    refuse_expired(approval)
    if approval.status != PENDING:
        raise ApprovalAnswered(f"This approval was already answered: it is {approval.status}.")
    # The conditional update is the claim: of two answers racing, exactly one changes the row.
    if not approvals.claim(session, approval_id):
        raise ApprovalAnswered("This approval was answered by another request just now.")
    session.refresh(approval)
    ownerevents.note_approval(session, approval)  # published with the answer, after commit
    return approval


def deny(session: Session, approval: Approval) -> None:
    approvals.move(approval, ApprovalStatus.DENIED)
    calls.answer(
        session,
        approval.call_id,
        CallStatus.DENIED,
        error=("owner_denied", "The owner declined this call."),
    )


def make_stale(session: Session, approval: Approval, reason: str) -> None:
    """The skill is no longer the one the owner was shown: the approval is void, nothing runs."""
    approvals.move(approval, ApprovalStatus.STALE)
    calls.answer(session, approval.call_id, CallStatus.FAILED, error=("skill_changed", reason))


def void_after_approval(session: Session, approval: Approval) -> None:
    """The approved call could not run because its skill moved meanwhile: the approval is void."""
    approvals.void(session, approval)


def approve(approval: Approval, decision: str) -> None:
    """The owner approved (once, or for the whole chat) a claimed approval."""
    approvals.move(approval, approvals.ANSWERED[decision])

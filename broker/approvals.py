"""Approvals: the owner's answer to exactly one call, which expires after 30 minutes."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.classify import CallPlan
from broker.editplans import refuse_expired
from broker.errors import ApprovalAnswered, ApprovalNotFound, ApprovalWithdrawn, GrantNotOffered
from broker.grants import CHAT, JOB
from broker.warnings import warning_for
from store import ownerevents
from store.lifecycle import approvals, calls
from store.models import Approval, Chat, Job, JobRun, ToolCall, utcnow
from store.states import ApprovalStatus, CallStatus
from store.versions import parse_pin

APPROVAL_LIFE = timedelta(minutes=30)
PENDING = ApprovalStatus.PENDING
DECISIONS = tuple(approvals.ANSWERED)
# The owner's answers: the broker's decisions, and "approve for this job", which is the
# broker's approve_for_chat on a job's approval (the grant goes to the job).
FOR_JOB = "approve_for_job"
ANSWERS = (*DECISIONS, FOR_JOB)
GRANTING = {"approve_for_chat": CHAT, FOR_JOB: JOB}
WITHDRAWN = (
    "approval_withdrawn",
    "The agent stopped waiting for the owner's answer (it cancelled the call, or its "
    "connection closed), so the approval was withdrawn and the call did not run.",
)
GUESSED_CHAT = (
    "The agent's client named no conversation, so skillfleet had to guess this call's chat "
    "(one for every conversation of that client): approving for it could let calls of "
    "conversations you never saw go ahead. Approve it once instead."
)


@dataclass(frozen=True)
class Asked:
    """Where an approval came from, so the owner knows what they answer: the chat and turn,
    or the job and job run, that made the call; and the script run it started once approved."""

    chat_id: str | None = None  # the chat's own id, as the agent sent it
    turn_id: str | None = None
    job_id: str | None = None
    job_name: str | None = None
    job_run_id: str | None = None
    run_id: str | None = None

    @property
    def by(self) -> str:
        """Who asked, in words: "chat 'support-42', turn 7" or "job 'nightly', run 5c1e2f3a"."""
        if self.job_run_id is not None:
            job = f"job '{self.job_name}'" if self.job_name else "a job deleted since"
            return f"{job}, run {self.job_run_id[:8]}"
        turn = f"turn {self.turn_id}" if self.turn_id else None
        if self.chat_id is not None:
            return f"chat '{self.chat_id}'" + (f", {turn}" if turn else "")
        return turn or "a call outside any chat or job"


def asked(session: Session, found: Sequence[Approval]) -> dict[str, Asked]:
    """Where each approval came from, by approval id (one query)."""
    if not found:
        return {}
    rows = session.execute(
        select(
            Approval.id, Chat.external_id, ToolCall.turn_id, ToolCall.run_id,
            JobRun.job_id, Job.name,
        )
        .select_from(Approval)
        .join(ToolCall, ToolCall.id == Approval.call_id)
        .outerjoin(Chat, Chat.id == Approval.chat_id)
        .outerjoin(JobRun, JobRun.id == Approval.job_run_id)
        .outerjoin(Job, Job.id == JobRun.job_id)
        .where(Approval.id.in_([approval.id for approval in found]))
    )  # fmt: skip
    facts = {row[0]: row[1:] for row in rows}
    result = {}
    for approval in found:
        chat, turn, run, job_id, job_name = facts.get(approval.id, (None,) * 5)
        result[approval.id] = Asked(
            chat_id=chat, turn_id=turn, job_id=job_id, job_name=job_name,
            job_run_id=approval.job_run_id, run_id=run,
        )  # fmt: skip
    return result


def grant_scope(approval: Approval) -> str | None:
    """What "approve always" grants: the job's grants (a job asked), the chat's (a chat
    asked), or nothing: such a call is only approved once."""
    if not approval.offers_chat_grant:
        return None
    if approval.job_run_id is not None:
        return JOB
    if approval.chat_id is not None:
        return CHAT
    return None


def skill_change(approval: Approval, now: str | None) -> str | None:
    """What changed about a pending approval's skill since it was asked (`now`: its hash now,
    None when it is gone), and what answering does then; None when nothing did."""
    name, asked = approval.skill_name, approval.skill_hash
    if approval.status != PENDING or name is None or now == asked:
        return None
    if now is not None and pins(approval):  # the pinned version runs, whatever is current
        return None
    what = (
        f"The skill '{name}' was removed after you were asked"
        if now is None
        else f"The skill '{name}' changed after you were asked: version {str(asked)[:8]} "
        f"is now {now[:8]}"
    )
    return (
        f"{what}. Approving runs nothing (the call fails with skill_changed, so the agent can "
        "ask again about the version there is now); deny it to say no."
    )


def pins(approval: Approval) -> bool:
    """Whether the call pins its skill's version (`name@<hash>`, shown so on the card): that
    version runs, whatever the skill is at now (store/pinned.py)."""
    _, pinned = parse_pin(str((approval.arguments or {}).get("skill_name", "")))
    return pinned is not None and pinned == approval.skill_hash


def grant_note(approval: Approval) -> str | None:
    """Why approving always is not offered for a pending approval asked in a chat, when it is
    the chat's doing (a guessed one); None otherwise."""
    if approval.chat_guessed and approval.job_run_id is None and approval.chat_id is not None:
        return GUESSED_CHAT
    return None


def withdrawn_note(approval: Approval) -> str | None:
    """What a withdrawn approval's card says."""
    if approval.status != ApprovalStatus.WITHDRAWN:
        return None
    return (
        "The agent stopped waiting for your answer (it cancelled the call, or its connection "
        "closed): the approval was withdrawn, nothing ran, and it can no longer be answered."
    )


def decision_for(approval: Approval, answer: str) -> str:
    """The broker's decision for the owner's answer to a pending approval.

    "approve_for_job" is approve_for_chat on a job's approval; either is refused where it
    would grant nothing: a call made outside any chat or job, or a job's answer in a chat.
    """
    scope = GRANTING.get(answer)
    if scope == CHAT and approval.status == PENDING and grant_note(approval) is not None:
        raise GrantNotOffered(GUESSED_CHAT)
    if scope is None or approval.status != PENDING or not approval.offers_chat_grant:
        return "approve_for_chat" if scope else answer  # the broker answers these itself
    offered = grant_scope(approval)
    if offered is None:
        raise GrantNotOffered(
            "This call was made outside any chat or job: there is nothing to grant it to; "
            "approve it once instead."
        )
    if answer == FOR_JOB and offered != JOB:
        raise GrantNotOffered(
            "This call was asked in a chat, not a job: approve it for the chat instead."
        )
    return "approve_for_chat"


def create_approval(
    session: Session, call: ToolCall, plan: CallPlan, rule: str | None, chat_guessed: bool = False
) -> Approval:
    """A pending approval bound to this call's tool, arguments, full skill hash and node;
    `chat_guessed`: the call's chat is the caller's guess, for which no grant is offered."""
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
        offers_chat_grant=plan.offers_grant(in_job=call.job_run_id is not None)
        and not (chat_guessed and call.job_run_id is None),
        chat_guessed=chat_guessed and call.job_run_id is None,
        created_at=now,
        expires_at=now + APPROVAL_LIFE,
    )
    session.add(approval)
    ownerevents.note_approval(session, approval)
    return approval


def expire_due(session: Session, owner_id: int | None = None, limit: int | None = None) -> int:
    """Mark pending approvals past their time `expired` (up to `limit` of them, the oldest
    first), and their calls too."""
    now = utcnow()
    query = select(Approval).where(Approval.status == PENDING, Approval.expires_at <= now)
    if owner_id is not None:
        query = query.where(Approval.owner_id == owner_id)
    if limit is not None:
        query = query.order_by(Approval.expires_at).limit(limit)
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
    if approval.status == ApprovalStatus.WITHDRAWN:
        raise ApprovalWithdrawn(
            "The agent stopped waiting for this approval (it cancelled the call, or its "
            "connection closed): it was withdrawn and nothing ran."
        )
    if approval.status != PENDING:
        raise ApprovalAnswered(f"This approval was already answered: it is {approval.status}.")
    # The conditional update is the claim: of two answers racing, exactly one changes the row.
    if not approvals.claim(session, approval_id):
        raise ApprovalAnswered("This approval was answered by another request just now.")
    session.refresh(approval)
    ownerevents.note_approval(session, approval)  # published with the answer, after commit
    return approval


def withdraw(session: Session, owner_id: int, call_id: str) -> Approval | None:
    """Withdraw the pending approval of the owner's call `call_id`: the approval ends
    `withdrawn` and the call `expired` (approval_withdrawn). None when the call has no pending
    approval (an answer, the expiry or another withdrawal came first)."""
    approval = session.scalar(
        select(Approval).where(Approval.call_id == call_id, Approval.owner_id == owner_id)
    )
    if approval is None or not approvals.withdraw_pending(session, approval.id, utcnow()):
        return None
    session.refresh(approval)
    ownerevents.note_approval(session, approval)
    calls.answer(session, call_id, CallStatus.EXPIRED, error=WITHDRAWN)
    return approval


def deny(session: Session, approval: Approval, reason: str | None = None) -> None:
    """The owner said no; `reason`, when given, is kept and told to the call's agent."""
    approvals.move(approval, ApprovalStatus.DENIED)
    approval.reason = reason
    said = f"The owner declined this call: {reason}" if reason else "The owner declined this call."
    calls.answer(session, approval.call_id, CallStatus.DENIED, error=("owner_denied", said))


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

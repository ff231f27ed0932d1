"""Approvals: the owner answers calls the policy would not run on its own."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import actor, owner_only, owner_or_agent
from api.blueprint import Blueprint
from api.nodes import broadcast_sync
from api.paging import Page, keyset, sql_page
from api.roles import owner_route
from api.schemas import ApprovalQuerySchema, ApprovalSchema, DecisionSchema
from api.services import services
from broker import editplans
from broker.approvals import (
    Asked,
    asked,
    decision_for,
    expire_due,
    grant_note,
    grant_scope,
    pins,
    skill_change,
    withdrawn_note,
)
from broker.errors import ApprovalNotFound
from relay.dispatch import carry_on_job_run
from store.db import transaction
from store.dependencies import declared_for
from store.errors import SkillNotFound, StoreError
from store.models import Approval, EditPlan
from store.pinned import pinned_view
from store.skills import current_hashes
from store.states import ApprovalStatus

blp = Blueprint("approvals", __name__, url_prefix="/api/approvals", description="Approvals")


class ApprovalCard:
    """What the owner is shown: the approval, who asked (chat and turn, or job and job run),
    the run it started and, for edit_skill, the diff and its warnings."""

    def __init__(
        self, approval: Approval, plan: EditPlan | None, origin: Asked, now: str | None
    ) -> None:
        self._approval = approval
        self.dependencies = _dependencies(approval)
        self.diff = plan.diff if plan is not None else None
        self.lint_warnings = plan.lint_warnings if plan is not None else None
        self.chat_id = origin.chat_id  # the chat's own id, not the row's
        self.turn_id = origin.turn_id
        self.job_id = origin.job_id
        self.job_name = origin.job_name
        self.run_id = origin.run_id
        self.asked_by = origin.by
        self.grant_scope = grant_scope(approval)
        self.grant_note = grant_note(approval)
        self.withdrawn_note = withdrawn_note(approval)
        self.skill_change = skill_change(approval, now)
        pending = approval.status == ApprovalStatus.PENDING and approval.skill_name is not None
        self.skill_hash_now = now if pending else None
        self.skill_changed = self.skill_change is not None if pending else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._approval, name)


def cards(session: Session, approvals: list[Approval]) -> list[ApprovalCard]:
    plans = editplans.for_approvals(session, [a.id for a in approvals if a.tool == "edit_skill"])
    origins = asked(session, approvals)
    now = _skills_now(session, approvals)
    return [
        ApprovalCard(
            approval,
            plans.get(approval.id),
            origins.get(approval.id, Asked()),
            now.get((approval.owner_id, approval.skill_name or "")),
        )
        for approval in approvals
    ]


def _skills_now(session: Session, approvals: list[Approval]) -> dict[tuple[int, str], str]:
    """The hash now of each pending approval's skill, by owner and name."""
    named: dict[int, set[str]] = {}
    for approval in approvals:
        if approval.status == ApprovalStatus.PENDING and approval.skill_name is not None:
            named.setdefault(approval.owner_id, set()).add(approval.skill_name)
    return {
        (owner, name): skill_hash
        for owner, names in named.items()
        for name, skill_hash in current_hashes(session, owner, names).items()
    }


def _dependencies(approval: Approval) -> list[str] | None:
    """What the approved run would install: the requirements its skill version declares, while
    the store holds that version."""
    if approval.tool != "run_skill_script" or not approval.skill_name:
        return None
    store = services().store
    try:
        skill = store.get(approval.owner_id, approval.skill_name)
    except SkillNotFound:
        return None
    if skill.hash != approval.skill_hash:
        if approval.skill_hash is None or not pins(approval):
            return None
        try:  # the version the call pins, while its files are kept
            skill = pinned_view(store, skill, approval.skill_hash)
        except StoreError:
            return None
    return list(declared_for(str(store.folder(skill)), skill.hash).requirements)


def _owned(session: Session, caller: int, approval_id: str) -> Approval:
    approval = session.get(Approval, approval_id)
    if approval is None or approval.owner_id != caller:
        raise ApprovalNotFound(f"You have no approval '{approval_id}'.")
    return approval


@blp.route("")
@blp.arguments(ApprovalQuerySchema(), location="query")
@blp.response(200, ApprovalSchema(many=True))
@keyset(blp)
def list_approvals(query: dict[str, Any], page: Page) -> list[ApprovalCard]:
    """List your approvals, newest first; `?status=pending` for the open ones"""
    caller = owner_or_agent()
    statement = select(Approval).where(Approval.owner_id == caller)
    if "status" in query:
        statement = statement.where(Approval.status == query["status"])
    with transaction(services().sessions) as session:
        expire_due(session, caller)
        newest_first = (Approval.created_at, Approval.id)
        return cards(session, sql_page(session, statement, page, caller, newest_first))


@blp.route("/<approval_id>")
@blp.response(200, ApprovalSchema)
def get_approval(approval_id: str) -> ApprovalCard:
    """Show one approval; an edit_skill approval carries the diff and its review warnings"""
    caller = owner_or_agent()
    with transaction(services().sessions) as session:
        expire_due(session, caller)
        return cards(session, [_owned(session, caller, approval_id)])[0]


@blp.route("/<approval_id>", methods=["POST"])
@owner_route
@blp.arguments(DecisionSchema())
@blp.response(200, ApprovalSchema)
def answer_approval(body: dict[str, Any], approval_id: str) -> ApprovalCard:
    """Answer an approval: approve, approve_for_chat, approve_for_job or deny (with a reason)"""
    caller = owner_only()
    with services().sessions() as session:
        decision = decision_for(_owned(session, caller, approval_id), body["decision"])
    approval = services().broker.answer(caller, approval_id, decision, actor(), body["reason"])
    if approval.tool == "edit_skill" and approval.status == ApprovalStatus.APPROVED:
        broadcast_sync()  # the edited skill has a new package for the nodes
    if approval.job_run_id is not None:
        carry_on_job_run(services().celery, approval.job_run_id)
    with services().sessions() as session:
        return cards(session, [approval])[0]

"""Approvals: the owner answers calls the policy would not run on its own."""

from __future__ import annotations

from typing import Any

from flask_smorest.pagination import PaginationParameters
from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import owner_only, owner_or_agent
from api.blueprint import Blueprint
from api.nodes import broadcast_sync
from api.paging import paginate, sql_page
from api.roles import owner_route
from api.schemas import ApprovalQuerySchema, ApprovalSchema, DecisionSchema
from api.services import services
from broker import editplans
from broker.approvals import Asked, asked, decision_for, expire_due, grant_scope
from broker.errors import ApprovalNotFound
from relay.dispatch import carry_on_job_run
from store.db import transaction
from store.models import Approval, EditPlan
from store.states import ApprovalStatus

blp = Blueprint("approvals", __name__, url_prefix="/api/approvals", description="Approvals")


class ApprovalCard:
    """What the owner is shown: the approval, who asked (chat and turn, or job and job run),
    the run it started and, for edit_skill, the diff and its warnings."""

    def __init__(self, approval: Approval, plan: EditPlan | None, origin: Asked) -> None:
        self._approval = approval
        self.diff = plan.diff if plan is not None else None
        self.lint_warnings = plan.lint_warnings if plan is not None else None
        self.chat_id = origin.chat_id  # the chat's own id, not the row's
        self.turn_id = origin.turn_id
        self.job_id = origin.job_id
        self.job_name = origin.job_name
        self.run_id = origin.run_id
        self.asked_by = origin.by
        self.grant_scope = grant_scope(approval)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._approval, name)


def cards(session: Session, approvals: list[Approval]) -> list[ApprovalCard]:
    plans = editplans.for_approvals(session, [a.id for a in approvals if a.tool == "edit_skill"])
    origins = asked(session, approvals)
    return [
        ApprovalCard(approval, plans.get(approval.id), origins.get(approval.id, Asked()))
        for approval in approvals
    ]


def _owned(session: Session, caller: int, approval_id: str) -> Approval:
    approval = session.get(Approval, approval_id)
    if approval is None or approval.owner_id != caller:
        raise ApprovalNotFound(f"You have no approval '{approval_id}'.")
    return approval


@blp.route("")
@blp.arguments(ApprovalQuerySchema(), location="query")
@blp.response(200, ApprovalSchema(many=True))
@paginate(blp)
def list_approvals(
    query: dict[str, Any], pagination_parameters: PaginationParameters
) -> list[ApprovalCard]:
    """List your approvals, newest first; `?status=pending` for the open ones"""
    caller = owner_or_agent()
    statement = select(Approval).where(Approval.owner_id == caller)
    if "status" in query:
        statement = statement.where(Approval.status == query["status"])
    with transaction(services().sessions) as session:
        expire_due(session, caller)
        newest_first = statement.order_by(Approval.created_at.desc(), Approval.id.desc())
        return cards(session, sql_page(session, newest_first, pagination_parameters))


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
    """Answer an approval: approve, approve_for_chat, approve_for_job or deny; then it runs"""
    caller = owner_only()
    with services().sessions() as session:
        decision = decision_for(_owned(session, caller, approval_id), body["decision"])
    approval = services().broker.answer(caller, approval_id, decision)
    if approval.tool == "edit_skill" and approval.status == ApprovalStatus.APPROVED:
        broadcast_sync()  # the edited skill has a new package for the nodes
    if approval.job_run_id is not None:
        carry_on_job_run(services().celery, approval.job_run_id)
    with services().sessions() as session:
        return cards(session, [approval])[0]

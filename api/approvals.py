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
from broker.approvals import expire_due
from broker.errors import ApprovalNotFound
from relay.dispatch import carry_on_job_run
from store.db import transaction
from store.models import Approval, EditPlan
from store.states import ApprovalStatus

blp = Blueprint("approvals", __name__, url_prefix="/api/approvals", description="Approvals")


class ApprovalCard:
    """What the owner is shown: the approval and, for edit_skill, the diff and its warnings."""

    def __init__(self, approval: Approval, plan: EditPlan | None) -> None:
        self._approval = approval
        self.diff = plan.diff if plan is not None else None
        self.lint_warnings = plan.lint_warnings if plan is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._approval, name)


def cards(session: Session, approvals: list[Approval]) -> list[ApprovalCard]:
    plans = editplans.for_approvals(session, [a.id for a in approvals if a.tool == "edit_skill"])
    return [ApprovalCard(approval, plans.get(approval.id)) for approval in approvals]


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
        approval = session.get(Approval, approval_id)
        if approval is None or approval.owner_id != caller:
            raise ApprovalNotFound(f"You have no approval '{approval_id}'.")
        return cards(session, [approval])[0]


@blp.route("/<approval_id>", methods=["POST"])
@owner_route
@blp.arguments(DecisionSchema())
@blp.response(200, ApprovalSchema)
def answer_approval(body: dict[str, Any], approval_id: str) -> ApprovalCard:
    """Answer an approval: approve, approve_for_chat or deny; an approved call then runs"""
    approval = services().broker.answer(owner_only(), approval_id, body["decision"])
    if approval.tool == "edit_skill" and approval.status == ApprovalStatus.APPROVED:
        broadcast_sync()  # the edited skill has a new package for the nodes
    if approval.job_run_id is not None:
        carry_on_job_run(services().celery, approval.job_run_id)
    with services().sessions() as session:
        return cards(session, [approval])[0]

"""Approvals: the owner answers calls the policy would not run on its own."""

from __future__ import annotations

from typing import Any

from flask_smorest import Blueprint
from flask_smorest.pagination import PaginationParameters
from sqlalchemy import select

from api.auth import owner_id
from api.paging import paginate, sql_page
from api.schemas import ApprovalQuerySchema, ApprovalSchema, DecisionSchema
from api.services import services
from broker.approvals import expire_due
from broker.errors import ApprovalNotFound
from store.db import transaction
from store.models import Approval

blp = Blueprint("approvals", __name__, url_prefix="/api/approvals", description="Approvals")


@blp.route("")
@blp.arguments(ApprovalQuerySchema, location="query")
@blp.response(200, ApprovalSchema(many=True))
@paginate(blp)
def list_approvals(
    query: dict[str, Any], pagination_parameters: PaginationParameters
) -> list[Approval]:
    """List your approvals, newest first; `?status=pending` for the open ones"""
    caller = owner_id()
    statement = select(Approval).where(Approval.owner_id == caller)
    if "status" in query:
        statement = statement.where(Approval.status == query["status"])
    with transaction(services().sessions) as session:
        expire_due(session, caller)
        newest_first = statement.order_by(Approval.created_at.desc())
        return sql_page(session, newest_first, pagination_parameters)


@blp.route("/<approval_id>")
@blp.response(200, ApprovalSchema)
def get_approval(approval_id: str) -> Approval:
    """Show one approval"""
    caller = owner_id()
    with transaction(services().sessions) as session:
        expire_due(session, caller)
        approval = session.get(Approval, approval_id)
    if approval is None or approval.owner_id != caller:
        raise ApprovalNotFound(f"You have no approval '{approval_id}'.")
    return approval


@blp.route("/<approval_id>", methods=["POST"])
@blp.arguments(DecisionSchema)
@blp.response(200, ApprovalSchema)
def answer_approval(body: dict[str, Any], approval_id: str) -> Approval:
    """Answer an approval: approve, approve_for_chat or deny; an approved call then runs"""
    return services().broker.answer(owner_id(), approval_id, body["decision"])

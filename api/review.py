"""The owner's review queue: drafts waiting to be enabled and edit plans waiting for an answer."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from api.auth import owner_only
from api.blueprint import Blueprint
from api.schemas import ReviewSchema
from api.services import services
from broker import editplans
from broker.approvals import expire_due
from broker.chatreview import issues
from store.db import transaction
from store.models import Chat, ChatReview, EditPlan, Skill

blp = Blueprint("review", __name__, url_prefix="/api/review", description="Review queue")


@blp.route("")
@blp.response(200, ReviewSchema)
def review_queue() -> dict[str, Any]:
    """What waits for you: drafts to enable, edit plans to answer, chats with issues"""
    caller = owner_only()
    drafts = select(Skill).where(
        Skill.owner_id == caller,
        Skill.author == "assistant",
        Skill.enabled.is_(False),
    )
    pending = select(EditPlan).where(
        EditPlan.owner_id == caller, EditPlan.status == editplans.PENDING
    )
    unreviewed = (
        select(Chat)
        .outerjoin(ChatReview, ChatReview.chat_id == Chat.id)
        .where(Chat.owner_id == caller, ChatReview.id.is_(None))
    )
    with transaction(services().sessions) as session:
        expire_due(session, caller)
        editplans.sweep(session, caller)
        waiting = list(session.scalars(drafts.order_by(Skill.updated_at.desc())))
        edits = list(session.scalars(pending.order_by(EditPlan.created_at.desc())))
        chats = sum(1 for chat in session.scalars(unreviewed) if issues(chat) > 0)
    return {
        "drafts": waiting,
        "edits": edits,
        "needs_review": len(waiting) + len(edits),
        "chats_with_issues": chats,
    }

"""Questions: what ask_owner and request_secret wait for, answered by the owner."""

from __future__ import annotations

from typing import Any

from flask_smorest.pagination import PaginationParameters
from sqlalchemy import select

from api.auth import owner_only, owner_or_agent
from api.blueprint import Blueprint
from api.paging import paginate, sql_page
from api.roles import owner_route
from api.schemas import QuestionAnswerSchema, QuestionQuerySchema, QuestionSchema
from api.services import services
from broker import questions
from relay.dispatch import carry_on_job_run
from store.db import transaction
from store.models import Question
from store.secrets import Sealer

blp = Blueprint("questions", __name__, url_prefix="/api/questions", description="Questions")


@blp.route("")
@blp.arguments(QuestionQuerySchema(), location="query")
@blp.response(200, QuestionSchema(many=True))
@paginate(blp)
def list_questions(
    query: dict[str, Any], pagination_parameters: PaginationParameters
) -> list[Question]:
    """List your questions, newest first; `?status=pending` for the open ones"""
    caller = owner_or_agent()
    statement = select(Question).where(Question.owner_id == caller)
    if "status" in query:
        statement = statement.where(Question.status == query["status"])
    with transaction(services().sessions) as session:
        questions.expire_due(session, caller)
        newest_first = statement.order_by(Question.created_at.desc(), Question.id.desc())
        return sql_page(session, newest_first, pagination_parameters)


@blp.route("/<question_id>")
@blp.response(200, QuestionSchema)
def get_question(question_id: str) -> Question:
    """Show one question (a secret question never shows the secret)"""
    caller = owner_or_agent()
    with transaction(services().sessions) as session:
        questions.expire_due(session, caller)
        return questions.owned(session, caller, question_id)


@blp.route("/<question_id>", methods=["POST"])
@owner_route
@blp.arguments(QuestionAnswerSchema())
@blp.response(200, QuestionSchema)
def answer_question(body: dict[str, Any], question_id: str) -> Question:
    """Answer a question (`answer`), or give the secret it asks for (`secret`); the call ends"""
    caller = owner_only()
    found = services()
    with transaction(found.sessions) as session:
        question = questions.answer(
            session,
            Sealer(found.settings.keys_dir),
            caller,
            question_id,
            body["answer"],
            body["secret"],
        )
    if question.job_run_id is not None:
        carry_on_job_run(found.celery, question.job_run_id)
    return question

"""Questions: what ask_owner and request_secret wait for, answered by the owner."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from api.auth import actor, owner_only, owner_or_agent
from api.blueprint import Blueprint
from api.paging import Page, keyset, sql_page
from api.roles import owner_route
from api.schemas import QuestionAnswerSchema, QuestionQuerySchema, QuestionSchema
from api.services import services
from broker import questions
from relay.dispatch import carry_on_job_run
from store.auditevents import audit_question
from store.db import transaction
from store.models import Question
from store.secrets import Sealer
from store.skills import current_hashes

blp = Blueprint("questions", __name__, url_prefix="/api/questions", description="Questions")


class QuestionCard:
    """What the owner is shown: the question and, when it names a skill, whether that skill is
    still the version it asked about (else what changed, and how to answer knowingly)."""

    def __init__(self, question: Question, now: str | None) -> None:
        self._question = question
        named = question.skill_name is not None
        self.skill_hash_now = now
        self.skill_changed = (now != question.skill_hash) if named else None
        self.skill_change = questions.changed_since(question, now) if self.skill_changed else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._question, name)


def cards(session: Session, caller: int, found: list[Question]) -> list[QuestionCard]:
    named = {question.skill_name for question in found if question.skill_name is not None}
    now = current_hashes(session, caller, named)
    return [QuestionCard(q, now.get(q.skill_name) if q.skill_name else None) for q in found]


@blp.route("")
@blp.arguments(QuestionQuerySchema(), location="query")
@blp.response(200, QuestionSchema(many=True))
@keyset(blp)
def list_questions(query: dict[str, Any], page: Page) -> list[QuestionCard]:
    """List your questions, newest first; `?status=pending` for the open ones"""
    caller = owner_or_agent()
    statement = select(Question).where(Question.owner_id == caller)
    if "status" in query:
        statement = statement.where(Question.status == query["status"])
    with transaction(services().sessions) as session:
        questions.expire_due(session, caller)
        newest_first = (Question.created_at, Question.id)
        return cards(session, caller, sql_page(session, statement, page, caller, newest_first))


@blp.route("/<question_id>")
@blp.response(200, QuestionSchema)
def get_question(question_id: str) -> QuestionCard:
    """Show one question (a secret question never shows the secret)"""
    caller = owner_or_agent()
    with transaction(services().sessions) as session:
        questions.expire_due(session, caller)
        return cards(session, caller, [questions.owned(session, caller, question_id)])[0]


@blp.route("/<question_id>", methods=["POST"])
@owner_route
@blp.arguments(QuestionAnswerSchema())
@blp.response(200, QuestionSchema)
def answer_question(body: dict[str, Any], question_id: str) -> QuestionCard:
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
            body["skill_hash"],
        )
        session.flush()
        audit_question(session, question, actor())
        card = cards(session, caller, [question])[0]
    if question.job_run_id is not None:
        carry_on_job_run(found.celery, question.job_run_id)
    return card

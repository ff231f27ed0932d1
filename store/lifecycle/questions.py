"""A question's state: the one writer of `questions.status`.

    pending -> answering -> answered
    answering -> pending                     (the answer could not be kept: ask again)
    pending -> unanswered                    (nobody answered in time)
    pending -> cancelled                     (the turn or job run that asked was stopped)

Answering starts with one conditional UPDATE (`claim`), so of two answers racing exactly one
goes on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from store.models import Question, utcnow
from store.states import QUESTIONS, QuestionStatus


def new(**values: Any) -> Question:
    """A pending question (not added to a session yet)."""
    return Question(status=QUESTIONS.created(QuestionStatus.PENDING), **values)


def claim(session: Session, question_id: str) -> bool:
    """pending -> answering; False when another answer (or the expiry) came first."""
    claimed = session.execute(
        update(Question)
        .where(Question.id == question_id, Question.status == QuestionStatus.PENDING)
        .values(status=QUESTIONS.check(QuestionStatus.PENDING, QuestionStatus.ANSWERING))
    )
    return int(claimed.rowcount) == 1  # type: ignore[attr-defined]


def move(question: Question, status: QuestionStatus, at: datetime | None = None) -> None:
    """Move a question the caller holds locked (claimed, or selected for update)."""
    question.status = QUESTIONS.check(question.status, status)
    if status != QuestionStatus.PENDING:
        question.answered_at = at or utcnow()


def end_pending(session: Session, question_id: str, status: QuestionStatus, at: datetime) -> bool:
    """pending -> unanswered | cancelled by id; False when it was no longer pending."""
    ended = session.execute(
        update(Question)
        .where(Question.id == question_id, Question.status == QuestionStatus.PENDING)
        .values(status=QUESTIONS.check(QuestionStatus.PENDING, status), answered_at=at)
    )
    return int(ended.rowcount) == 1  # type: ignore[attr-defined]

"""Questions: what ask_owner and request_secret wait for, and the owner's answers.

A question's call waits `pending_question` (its id is the question's id) until the owner answers
(console, CLI, REST: `answer`), nobody does in time (`expire_due`: the question is
`unanswered`, the call `expired`), or the turn that asked stops (`cancel`: `cancelled`, the call
`failed`). A secret's value goes sealed to owner_secrets at once; the question, the call, its
result and every event hold only its name. The tools themselves are broker/ownertools.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.errors import BrokerError
from store import ownerevents, ownersecrets
from store.errors import SkillChanged
from store.lifecycle import calls
from store.lifecycle import questions as questionstates
from store.limits import MAX_ANSWER_CHARS, MAX_SECRET_BYTES
from store.models import Question, utcnow
from store.secrets import Sealer
from store.states import CallStatus, QuestionStatus

ASK_OWNER = "ask_owner"
REQUEST_SECRET = "request_secret"
# The tools whose call waits for the owner's answer; a question's id is its call's id.
ASKING = frozenset({ASK_OWNER, REQUEST_SECRET})
QUESTION, SECRET = "question", "secret"
PENDING = QuestionStatus.PENDING
ID_CHARS = 36


class QuestionError(BrokerError):
    """Root of the errors of answering a question."""

    code = "question_error"
    status = 400


class QuestionNotFound(QuestionError):
    """Raised when the caller has no question with that id."""

    code = "question_not_found"
    status = 404


class QuestionAnswered(QuestionError):
    """Raised when a question was already answered, went unanswered or was cancelled."""

    code = "question_answered"
    status = 409


class AnswerInvalid(QuestionError):
    """Raised when an answer is not one of the choices, too long or holds a NUL."""

    code = "answer_invalid"
    status = 422


class AnswerKindWrong(QuestionError):
    """Raised when a secret question gets a plain answer, or a plain question a secret."""

    code = "answer_kind"
    status = 422


@dataclass(frozen=True)
class QuestionAsked:
    """A handler's answer when its call now waits for the owner (`pending_question`)."""

    question_id: str


def waiting_message(question: Question) -> str:
    """The sentence a push shows: what is asked (cut), or which secret is wanted."""
    if question.kind == SECRET:
        return f"An agent asks you for the secret {question.secret_name}."
    text = question.text if len(question.text) <= 200 else question.text[:197] + "..."
    return f"An agent asks you: {text}"


def note(session: Session, question: Question) -> None:
    """The question's state for the owner's feed once the session commits."""

    def snapshot() -> dict[str, Any]:
        return {
            "question_id": question.id,
            "call_id": question.call_id,
            "kind": question.kind,
            "status": question.status,
        }

    created = question.status == PENDING
    kind = "question.created" if created else "question.answered"
    ownerevents.note(session, question.owner_id, kind, snapshot)


def answer(
    session: Session,
    sealer: Sealer,
    owner_id: int,
    question_id: str,
    text: str | None,
    secret: str | None,
    skill_hash: str | None = None,
) -> Question:
    """The owner's answer (or secret) to their pending question; its call ends `done`.

    A secret for a skill allows the version the card showed (`skill_hash`, the owner's explicit
    choice, else the one asked about), and only while the skill is still that version: else
    SkillChanged, and nothing is stored. Of two answers racing, the claim lets exactly one
    through; the other gets 409.
    """
    expire_due(session, owner_id)
    question = owned(session, owner_id, question_id)
    result = _result(question, text, secret)
    if question.status != PENDING:
        raise QuestionAnswered(f"This question was already settled: it is {question.status}.")
    version = _version_allowed(session, question, skill_hash)
    if not questionstates.claim(session, question.id):
        raise QuestionAnswered("This question was answered by another request just now.")
    session.refresh(question)
    if question.kind == SECRET:
        assert secret is not None and question.secret_name is not None
        ownersecrets.put(
            session, sealer, owner_id, question.secret_name, secret, question.skill_name, version
        )
    else:
        question.answer = text
    questionstates.move(question, QuestionStatus.ANSWERED)
    if not calls.answer(session, question.call_id, CallStatus.DONE, result=result):
        raise QuestionAnswered("The call that asked this question has already ended.")
    note(session, question)
    return question


def _result(question: Question, text: str | None, secret: str | None) -> dict[str, Any]:
    """What the model gets; the answer is checked against the question's kind and choices."""
    if question.kind == SECRET:
        if secret is None or text is not None:
            raise AnswerKindWrong("This question asks for a secret: send it as 'secret'.")
        _check_value(secret, "The secret")
        if len(secret.encode()) > MAX_SECRET_BYTES:
            raise AnswerInvalid(f"The secret must be at most {MAX_SECRET_BYTES} bytes.")
        return {"stored": True, "name": question.secret_name}
    if text is None or secret is not None:
        raise AnswerKindWrong("This question asks for an answer, not a secret: send 'answer'.")
    _check_value(text, "The answer")
    if len(text) > MAX_ANSWER_CHARS:
        raise AnswerInvalid(f"The answer must be at most {MAX_ANSWER_CHARS} characters.")
    if question.choices and text not in question.choices:
        raise AnswerInvalid("The answer must be one of the choices: " + ", ".join(question.choices))
    return {"answer": text}


def _version_allowed(session: Session, question: Question, chosen: str | None) -> str | None:
    """The full hash of the skill version the answer allows: the one the owner chose, else the
    one asked about; SkillChanged when the skill is no longer that version (or is gone)."""
    if question.skill_name is None:
        if chosen is not None:
            raise AnswerInvalid("This question names no skill: send no 'skill_hash'.")
        return None
    now = skill_now(session, question)
    if now is not None and (now.startswith(chosen) if chosen else now == question.skill_hash):
        return now
    if chosen is not None and now is not None:
        raise SkillChanged(
            f"The skill '{question.skill_name}' is version {now[:8]} now, not the version "
            f"{chosen[:8]} you chose. Nothing was stored. Review it, then answer with "
            f"skill_hash {now[:8]} to allow that one."
        )
    raise SkillChanged(changed_since(question, now) + " Nothing was stored.")


def skill_now(session: Session, question: Question) -> str | None:
    """The hash of the question's skill now (None: it names none, or the skill is gone)."""
    if question.skill_name is None:
        return None
    return ownersecrets.current_hash(session, question.owner_id, question.skill_name)


def changed_since(question: Question, now: str | None) -> str:
    """What changed about the question's skill since it was asked, and how to answer knowingly."""
    name = question.skill_name
    if now is None:
        return f"The skill '{name}' was removed after you were asked: no version can be allowed."
    if question.skill_hash is None:
        asked = "This question was asked before skill versions were recorded"
    else:
        asked = (
            f"The skill '{name}' changed after you were asked: you were asked about version "
            f"{question.skill_hash[:8]}"
        )
    return (
        f"{asked}; it is version {now[:8]} now. Storing the secret allows only a version "
        f"you chose: review it, then answer with skill_hash {now[:8]} to allow that one."
    )


def _check_value(value: str, what: str) -> None:
    if not value:
        raise AnswerInvalid(f"{what} must not be empty.")
    if "\x00" in value:
        raise AnswerInvalid(f"{what} must not hold a NUL character.")


def owned(session: Session, owner_id: int, question_id: str) -> Question:
    """The owner's question, locked for answering; 404 for anyone else's or none."""
    found = None
    if _is_id(question_id):  # a NUL would not even reach PostgreSQL's comparison
        query = select(Question).where(Question.id == question_id).with_for_update()
        found = session.scalar(query)
    if found is None or found.owner_id != owner_id:
        raise QuestionNotFound(f"You have no question '{question_id[:64]}'.")
    return found


def _is_id(text: str) -> bool:
    """Whether `text` could be a question's id (its call's: a UUID's 36 characters)."""
    return 0 < len(text) <= ID_CHARS and text.isprintable()


def expire_due(session: Session, owner_id: int | None = None, limit: int | None = None) -> int:
    """Pending questions past their time become `unanswered` (up to `limit` of them, the
    oldest first), their calls `expired`."""
    now = utcnow()
    query = select(
        Question.id, Question.owner_id, Question.kind, Question.created_at, Question.expires_at
    ).where(Question.status == PENDING, Question.expires_at <= now)
    if owner_id is not None:
        query = query.where(Question.owner_id == owner_id)
    if limit is not None:
        query = query.order_by(Question.expires_at).limit(limit)
    ended = 0
    for question_id, owner, kind, created_at, expires_at in session.execute(query).all():
        if not questionstates.end_pending(session, question_id, QuestionStatus.UNANSWERED, now):
            continue  # answered or cancelled meanwhile
        waited = _duration((expires_at - created_at).total_seconds())
        message = f"The owner did not answer within {waited}; go on without the answer."
        calls.answer(session, question_id, CallStatus.EXPIRED, error=("unanswered", message))
        _note_end(session, owner, question_id, kind, QuestionStatus.UNANSWERED)
        ended += 1
    return ended


def cancel(session: Session, call_id: str, why: str) -> bool:
    """The turn or job run that asked stopped: its pending question is cancelled and its call
    fails (`question_cancelled`); False when it was no longer pending."""
    found = session.execute(
        select(Question.owner_id, Question.kind).where(Question.id == call_id)
    ).first()
    cancelled = QuestionStatus.CANCELLED
    if found is None or not questionstates.end_pending(session, call_id, cancelled, utcnow()):
        return False
    message = f"Nobody waits for the answer any more: {why}"
    calls.answer(session, call_id, CallStatus.FAILED, error=("question_cancelled", message))
    _note_end(session, found.owner_id, call_id, found.kind, cancelled)
    return True


def _note_end(
    session: Session, owner_id: int, question_id: str, kind: str, status: QuestionStatus
) -> None:
    data = {"question_id": question_id, "call_id": question_id, "kind": kind, "status": status}
    ownerevents.note(session, owner_id, "question.answered", data)


def _duration(seconds: float) -> str:
    """A wait in words: "30 minutes", "1 minute", "45 seconds"."""
    if seconds < 60:
        return f"{max(1, round(seconds))} seconds"
    minutes = round(seconds / 60)
    return f"{minutes} minute" + ("s" if minutes != 1 else "")

"""The tools that reach the owner: ask_owner, request_secret (their calls wait for an answer,
broker/questions.py) and notify_owner. Each sends the owner a notice (a push), and all their
notices together are at most a few per turn and per hour (relay/notices.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
import structlog

from broker.context import ToolContext
from broker.errors import BrokerError, InvalidCall
from broker.questions import (
    ASK_OWNER,
    QUESTION,
    REQUEST_SECRET,
    SECRET,
    QuestionAsked,
    note,
    waiting_message,
)
from broker.registry import Tool
from broker.tiers import Tier
from broker.turns import turn_key
from relay import feed, notices
from store.auditevents import ALLOW, audit_decision
from store.db import transaction
from store.errors import ServiceUnavailable, SkillNotFound
from store.lifecycle import calls
from store.lifecycle import questions as questionstates
from store.limits import MAX_CHOICE_CHARS, MAX_CHOICES, MAX_NOTICE_CHARS, MAX_QUESTION_CHARS
from store.models import Question, Skill, ToolCall, utcnow
from store.names import is_valid_name
from store.settings import (
    DEFAULT_NOTIFY_PER_HOUR,
    DEFAULT_NOTIFY_PER_TURN,
    DEFAULT_QUESTION_WAIT,
    Settings,
)
from store.states import CallStatus
from store.visible import first_hidden

log = structlog.get_logger(__name__)

NOTIFY_OWNER = "notify_owner"
LEVELS = ("info", "warning", "urgent")
SECRET_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
Publish = Callable[[int, str, dict[str, Any]], object]


class NotifyLimit(BrokerError):
    """Raised when notify_owner, ask_owner or request_secret would send the owner more notices
    than a turn or an hour allows."""

    code = "notify_limit"
    status = 429


@dataclass(frozen=True)
class OwnerDesk:
    """What the owner tools need beyond a call: the settings' wait and limits, the owner's
    feed (push, webhooks) and Redis for counting notices."""

    question_wait: float = DEFAULT_QUESTION_WAIT
    notify_per_turn: int = DEFAULT_NOTIFY_PER_TURN
    notify_per_hour: int = DEFAULT_NOTIFY_PER_HOUR
    publish: Publish | None = None
    client: redis.Redis | None = None

    @classmethod
    def of(cls, settings: Settings, publish: Publish | None, client: redis.Redis) -> OwnerDesk:
        return cls(
            settings.question_wait,
            settings.notify_per_turn,
            settings.notify_per_hour,
            publish,
            client,
        )

    # -- the tools ------------------------------------------------------------------

    def ask_owner(self, context: ToolContext, arguments: dict[str, Any]) -> QuestionAsked:
        _only(ASK_OWNER, arguments)
        text = _text(arguments, "question", MAX_QUESTION_CHARS)
        choices = _choices(arguments.get("choices"))
        return self._ask(context, kind=QUESTION, text=text, choices=choices)

    def request_secret(self, context: ToolContext, arguments: dict[str, Any]) -> QuestionAsked:
        _only(REQUEST_SECRET, arguments)
        name = arguments.get("name")
        if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
            raise InvalidCall(
                "HOST: 'name' must be an environment-variable style name such as API_TOKEN "
                "(A-Z, 0-9 and _, starting with a letter, at most 64 characters)."
            )
        reason = _text(arguments, "reason", MAX_QUESTION_CHARS)
        named = arguments.get("skill")
        skill = _owned_skill(context, named) if named is not None else None
        return self._ask(
            context, kind=SECRET, text=reason, secret_name=name,
            skill_name=skill.name if skill else None, skill_hash=skill.hash if skill else None,
        )  # fmt: skip

    def notify_owner(self, context: ToolContext, arguments: dict[str, Any]) -> dict[str, Any]:
        _only(NOTIFY_OWNER, arguments)
        message = _text(arguments, "message", MAX_NOTICE_CHARS)
        level = arguments.get("level", "info")
        if level not in LEVELS:
            raise InvalidCall("HOST: 'level' must be info, warning or urgent.")
        self._count_notice(context, "put the rest in your answer")
        call = context.call
        self._tell(
            call.owner_id, "owner.notified", call_id=call.id, turn_id=call.turn_id,
            job_run_id=call.job_run_id, level=level, message=message,
        )  # fmt: skip
        return {"sent": True}

    # -- asking -------------------------------------------------------------------------

    def _ask(self, context: ToolContext, **values: Any) -> QuestionAsked:
        """Save the question with its call, now `pending_question`, and tell the owner: a
        notice, counted as notify_owner's are (past a limit nothing is asked)."""
        turn = self._count_notice(context, "ask in your answer instead")
        try:
            question = self._save_question(context, values)
        except BaseException:
            self._uncount_notice(context, turn)
            raise
        call = context.call
        log.info("call waits for the owner's answer", call_id=call.id, tool=call.tool)
        self._tell(
            call.owner_id, "question.waiting", question_id=question.id, call_id=call.id,
            tool=call.tool, question_kind=question.kind, turn_id=call.turn_id,
            job_run_id=call.job_run_id,
            secret_name=question.secret_name, message=waiting_message(question),
        )  # fmt: skip
        return QuestionAsked(question.id)

    def _save_question(self, context: ToolContext, values: dict[str, Any]) -> Question:
        call = context.call
        now = utcnow()
        question = questionstates.new(
            id=call.id, owner_id=call.owner_id, call_id=call.id, chat_id=call.chat_id,
            job_run_id=call.job_run_id, turn_id=call.turn_id, created_at=now,
            expires_at=now + timedelta(seconds=self.question_wait), **values,
        )  # fmt: skip
        with transaction(context.sessions) as session:
            for rider in context.riders:  # the decision's count rides on the events' round trip
                feed.also(session, rider)
            decided = call.status == CallStatus.DECIDING
            if decided:
                calls.record(session, call, CallStatus.PENDING_QUESTION)
            else:  # the policy had the owner approve the call first
                calls.answer(session, call.id, CallStatus.PENDING_QUESTION, call=call)
            session.flush()
            session.add(question)
            note(session, question)
            if decided:  # the owner's approval before is audited on its own
                session.flush()
                audit_decision(session, call, ALLOW)
        return question

    def _tell(self, owner_id: int, event: str, **data: Any) -> None:
        """Add a notice to the owner's feed; never fails the call (the rows are saved)."""
        if self.publish is None:
            return
        try:
            self.publish(owner_id, event, data)
        except Exception as e:  # noqa: BLE001 - only the notice is lost
            log.warning("owner not told", kind=event, error_type=type(e).__name__)

    def _count_notice(self, context: ToolContext, instead: str) -> str | None:
        """Count one notice against its turn and the hour (the turn it counted against, None
        when nothing counts); past either limit, refuse it uncounted, saying what to do
        `instead`."""
        if self.client is None:
            return None
        call = context.call
        turn = notice_turn(call)
        try:
            passed = notices.take(
                self.client, call.owner_id, turn, self.notify_per_turn, self.notify_per_hour
            )
        except redis.RedisError as e:
            raise ServiceUnavailable("The owner's notices can't be counted now.") from e
        if passed == notices.Passed.TURN:
            raise NotifyLimit(
                f"HOST: this turn already sent {self.notify_per_turn} notices to the owner "
                f"(questions count too), the most a turn may send; {instead}."
            )
        if passed == notices.Passed.HOUR:
            raise NotifyLimit(
                f"HOST: the owner was already sent {self.notify_per_hour} notices this hour "
                f"(questions count too), the most an hour allows; {instead}."
            )
        return turn

    def _uncount_notice(self, context: ToolContext, turn: str | None) -> None:
        if self.client is None or turn is None:
            return
        try:
            notices.give_back(self.client, context.call.owner_id, turn)
        except redis.RedisError as e:  # the count is a little high for this hour: logged
            log.warning("notice not uncounted", error_type=type(e).__name__)


def notice_turn(call: ToolCall) -> str:
    """The turn a call's notice counts against: its turn or job run; without either, its
    chat's clock hour (as its calls are counted, broker/turns.py), or, outside any chat, every
    such call of the owner in that hour. Leaving out `turn_id` never lifts the turn's limit."""
    given = call.turn_id or call.job_run_id
    if given:
        return given
    return turn_key(None, call.chat_id) or f"no-chat:{utcnow().strftime('%Y-%m-%dT%H')}"


# -- arguments ----------------------------------------------------------------------------


FIELDS = {
    ASK_OWNER: ("question", "choices"),
    REQUEST_SECRET: ("name", "reason", "skill"),
    NOTIFY_OWNER: ("message", "level"),
}


def _only(tool: str, arguments: dict[str, Any]) -> None:
    """Refuse fields the tool's schema doesn't have (`additionalProperties: false`)."""
    unknown = sorted(str(key)[:64] for key in arguments if key not in FIELDS[tool])
    if unknown:
        raise InvalidCall(f"HOST: {tool} takes {', '.join(FIELDS[tool])}, not {unknown}.")


def _text(arguments: dict[str, Any], key: str, most: int) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidCall(f"HOST: '{key}' must be a non-empty string.")
    if len(value) > most:
        raise InvalidCall(f"HOST: '{key}' must be at most {most} characters.")
    if "\x00" in value:
        raise InvalidCall(f"HOST: '{key}' must not hold a NUL character.")
    return value


def _choices(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CHOICES:
        raise InvalidCall(f"HOST: 'choices' must be a list of 1 to {MAX_CHOICES} strings.")
    for choice in value:
        if not isinstance(choice, str) or not choice.strip() or "\x00" in choice:
            raise InvalidCall("HOST: each choice must be a non-empty string without NUL.")
        if len(choice) > MAX_CHOICE_CHARS:
            raise InvalidCall(f"HOST: each choice must be at most {MAX_CHOICE_CHARS} characters.")
        hidden = first_hidden(choice)
        if hidden is not None:  # a choice is a button's label, and the answer it sends
            raise InvalidCall(
                f"HOST: a choice must be plain text; one holds {hidden}, a control or format "
                "character."
            )
    if len(set(value)) != len(value):
        raise InvalidCall("HOST: the choices must differ from each other.")
    return list(value)


def _owned_skill(context: ToolContext, skill: Any) -> Skill:
    """A skill the owner has, as it is now; a secret of a skill belongs to that skill alone,
    and the owner's answer allows exactly this version of it."""
    if not isinstance(skill, str) or not is_valid_name(skill):
        raise InvalidCall("HOST: 'skill' must name one of your skills, as list_skills gives it.")
    try:
        return context.store.get(context.owner_id, skill)
    except SkillNotFound:
        raise SkillNotFound(f"HOST: there is no skill named {skill!r}; call list_skills.") from None


# -- the tools' definitions -------------------------------------------------------------


def _parameters(required: list[str], **properties: Any) -> dict[str, Any]:
    """A tool's JSON Schema: an object of exactly these properties."""
    closed = {"required": required, "additionalProperties": False}
    return {"type": "object", "properties": properties, **closed}


def tools(desk: OwnerDesk) -> tuple[Tool, ...]:
    """ask_owner, request_secret and notify_owner, served by `desk`."""
    return (
        Tool(
            ASK_OWNER,
            Tier.READ,
            "Asks the owner a question and waits for the answer (up to 30 minutes by default); "
            'give choices when the answer is one of a few. Returns {"answer": ...}.',
            _parameters(
                ["question"],
                question={"type": "string", "maxLength": MAX_QUESTION_CHARS},
                choices={
                    "type": "array",
                    "items": {"type": "string", "maxLength": MAX_CHOICE_CHARS},
                    "maxItems": MAX_CHOICES,
                    "description": "The answers the owner may pick from.",
                },
            ),
            desk.ask_owner,
        ),
        Tool(
            NOTIFY_OWNER,
            Tier.READ,
            "Sends the owner a short notice (a push and their event feed) without waiting; "
            'a few per turn and per hour at most. Returns {"sent": true}.',
            _parameters(
                ["message"],
                message={"type": "string", "maxLength": MAX_NOTICE_CHARS},
                level={"type": "string", "enum": list(LEVELS), "default": "info"},
            ),
            desk.notify_owner,
        ),
        Tool(
            REQUEST_SECRET,
            Tier.SECRET,
            "Asks the owner to type a secret (an API key, a password) on a secret card and "
            "stores it for skills' scripts; you never see the value. Returns "
            '{"stored": true, "name": ...}.',
            _parameters(
                ["name", "reason"],
                name={
                    "type": "string",
                    "pattern": SECRET_NAME.pattern.join("^$"),
                    "description": "Environment-variable style, e.g. GITHUB_TOKEN.",
                },
                reason={"type": "string", "maxLength": MAX_QUESTION_CHARS},
                skill={
                    "type": "string",
                    "description": "The skill the secret belongs to (else the owner's own).",
                },
            ),
            desk.request_secret,
        ),
    )

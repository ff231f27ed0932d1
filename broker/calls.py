"""Running one tool call: record it, run the tool, shape the result, keep the outcome."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from broker.context import ToolContext
from broker.errors import InvalidCall
from broker.registry import Registry
from broker.results import shape_result, tool_failure
from store.db import SessionFactory, transaction
from store.models import Chat, ToolCall, utcnow
from store.skills import SkillStore

log = structlog.get_logger(__name__)

MODES = ("execute", "plan")
MAX_ID_CHARS = 200


@dataclass(frozen=True)
class CallRequest:
    """The envelope of `POST /api/tools/<tool>`."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    chat_id: str | None = None
    turn_id: str | None = None
    job_run_id: str | None = None
    mode: str = "execute"


@dataclass(frozen=True)
class CallOutcome:
    """What the caller gets back: the envelope of DESIGN.md section 4."""

    call_id: str
    status: str
    result: Any = None
    error: dict[str, str] | None = None

    def envelope(self) -> dict[str, Any]:
        body: dict[str, Any] = {"call_id": self.call_id, "status": self.status}
        if self.result is not None:
            body["result"] = self.result
        if self.error is not None:
            body["error"] = self.error
        return body


class ToolService:
    """Runs tool calls for owners and records each one."""

    def __init__(self, registry: Registry, store: SkillStore, sessions: SessionFactory) -> None:
        self.registry = registry
        self.store = store
        self.sessions = sessions

    def call(self, owner_id: int, request: CallRequest) -> CallOutcome:
        tool = self.registry.get(request.tool)
        _check_envelope(request)
        chat = self._chat(owner_id, request.chat_id) if request.chat_id else None
        call_id = str(uuid.uuid4())
        context = ToolContext(
            call_id=call_id,
            owner_id=owner_id,
            store=self.store,
            sessions=self.sessions,
            chat=chat,
            job_run_id=request.job_run_id,
            turn_id=request.turn_id,
            mode=request.mode,
        )
        outcome = self._run(tool.handler, context, request.arguments)
        self._record(call_id, owner_id, chat, request, tool.name, tool.tier, outcome)
        return outcome

    def _run(self, handler: Any, context: ToolContext, arguments: dict[str, Any]) -> CallOutcome:
        structlog.contextvars.bind_contextvars(call_id=context.call_id)
        try:
            result = handler(context, arguments)
        except Exception as e:  # every failure becomes an envelope; ours keep their message
            code, message = tool_failure(e)
            if code == "tool_failed":
                log.exception("tool failed", error_type=type(e).__name__)
            return CallOutcome(context.call_id, "failed", error={"code": code, "message": message})
        finally:
            structlog.contextvars.unbind_contextvars("call_id")
        return CallOutcome(context.call_id, "done", result=shape_result(result))

    def _chat(self, owner_id: int, external_id: str) -> Chat:
        query = select(Chat).where(Chat.owner_id == owner_id, Chat.external_id == external_id)
        with self.sessions() as session:
            chat = session.scalar(query)
        if chat is not None:
            return chat
        try:
            with transaction(self.sessions) as session:
                chat = Chat(owner_id=owner_id, external_id=external_id)
                session.add(chat)
            return chat
        except IntegrityError:  # another request created it first
            with self.sessions() as session:
                found = session.scalar(query)
            assert found is not None
            return found

    def _record(
        self,
        call_id: str,
        owner_id: int,
        chat: Chat | None,
        request: CallRequest,
        tool: str,
        tier: str,
        outcome: CallOutcome,
    ) -> None:
        with self.sessions() as session, session.begin():
            session.add(
                ToolCall(
                    id=call_id,
                    owner_id=owner_id,
                    chat_id=chat.id if chat else None,
                    job_run_id=request.job_run_id,
                    turn_id=request.turn_id,
                    tool=tool,
                    tier=str(tier),
                    mode=request.mode,
                    status=outcome.status,
                    error_code=outcome.error["code"] if outcome.error else None,
                    error_message=outcome.error["message"] if outcome.error else None,
                    finished_at=utcnow(),
                )
            )

    def get_call(self, owner_id: int, call_id: str) -> ToolCall | None:
        with self.sessions() as session:
            call = session.get(ToolCall, call_id)
        return call if call is not None and call.owner_id == owner_id else None


def _check_envelope(request: CallRequest) -> None:
    if request.mode not in MODES:
        raise InvalidCall("'mode' must be 'execute' or 'plan'.")
    if request.chat_id is not None and request.job_run_id is not None:
        raise InvalidCall("Send either 'chat_id' or 'job_run_id', not both.")
    for key in ("chat_id", "turn_id", "job_run_id"):
        value = getattr(request, key)
        if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS):
            raise InvalidCall(f"'{key}' must be a string of 1 to {MAX_ID_CHARS} characters.")

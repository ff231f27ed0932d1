"""The envelope of a tool call: what an agent sends and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row

from broker.errors import InvalidCall
from store.lifecycle.calls import OPEN_STATES
from store.limits import MAX_ID_CHARS
from store.models import ToolCall
from store.states import CallStatus

__all__ = ["OPEN_STATES", "CallOutcome", "CallRequest"]

MODES = ("execute", "plan")


@dataclass(frozen=True)
class CallRequest:
    """The body of `POST /api/tools/<tool>`."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)
    chat_id: str | None = None
    turn_id: str | None = None
    job_run_id: str | None = None
    mode: str = "execute"
    # load_skill gives the content every time: the chat id names no context the server can
    # follow (the MCP gateway's name for a client, whose host may hold many conversations).
    full_loads: bool = False
    # The chat id is the caller's guess, not one conversation (an MCP client that named none):
    # the chat's grants don't apply to the call and "approve for this chat" is not offered.
    chat_guessed: bool = False
    # Dotted names under `arguments` the JSON body gave more than once (see broker.editargs).
    repeated: tuple[str, ...] = ()

    def check(self) -> None:
        if self.mode not in MODES:
            raise InvalidCall("'mode' must be 'execute' or 'plan'.")
        if self.chat_id is not None and self.job_run_id is not None:
            raise InvalidCall("Send either 'chat_id' or 'job_run_id', not both.")
        for key in ("chat_id", "turn_id", "job_run_id"):
            value = getattr(self, key)
            if value is not None and not (
                isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS
            ):
                raise InvalidCall(f"'{key}' must be a string of 1 to {MAX_ID_CHARS} characters.")
            if value is not None and not value.isprintable():  # the owner reads it on cards
                raise InvalidCall(
                    f"'{key}' must be printable: no control, format or separator characters."
                )


@dataclass(frozen=True)
class CallOutcome:
    """The answer envelope of DESIGN.md section 4."""

    call_id: str
    status: str
    result: Any = None
    error: dict[str, str] | None = None
    approval_id: str | None = None
    run_id: str | None = None
    question_id: str | None = None  # a question's id is its call's id (broker/questions.py)

    def envelope(self) -> dict[str, Any]:
        body: dict[str, Any] = {"call_id": self.call_id, "status": self.status}
        for key in ("result", "error", "approval_id", "run_id", "question_id"):
            value = getattr(self, key)
            if value is not None:
                body[key] = value
        return body

    @classmethod
    def of(cls, call: ToolCall | Row[*tuple[Any, ...]]) -> CallOutcome:
        """The envelope of a call, or of a row of its envelope's columns (`Broker.outcome`)."""
        error = None
        if call.error_code:
            error = {"code": call.error_code, "message": call.error_message or ""}
        asking = call.id if call.status == CallStatus.PENDING_QUESTION else None
        return cls(call.id, call.status, call.result, error, call.approval_id, call.run_id, asking)

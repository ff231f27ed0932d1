"""A chat turn's stream in the AI SDK's UI message stream protocol (`x-vercel-ai-ui-message-stream:
v1`), translated from the turn's own stream (relay/streams.py TurnStream).

Each chunk is one server-sent event, `data: <json>`, and the stream ends with `data: [DONE]`:

    start (messageId: the turn's id) · data-history (when the client's history was not the
    server's) · per model request: start-step, reasoning-start/-delta/-end, text-start/-delta/
    -end, tool-input-available (a dynamic tool: toolName, input), tool-approval-request
    (approvalId: the owner answers it with POST /api/approvals/<id>), data-question, then
    tool-approval-response and tool-output-available, tool-output-denied or tool-output-error,
    finish-step · message-metadata (usage summed so far) · error (a turn that failed) · finish

A stream follows its turn from the first entry, so a client that reconnects gets the whole
answer again, as the SDK's resume expects. It does not end on the idle limit (a call may wait
for its approval as long as the turn may run), only with the turn or the stream's time limit;
a turn that ended without its end entry in Redis (the stream lost) ends from its row.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from api.livejobs import FollowChat
from api.services import Services
from api.sse import KEEPALIVE
from relay import naming
from relay.hub import OUTAGES, StreamHub, Subscription
from relay.streams import TURN_END_KINDS, Event
from store.lifecycle import turns as turnstates
from store.models import Turn
from store.states import TurnStatus

HEADERS = {"x-vercel-ai-ui-message-stream": "v1"}
DONE = "data: [DONE]\n\n"
# A quiet chat stream asks the database whether its turn ended every this many keepalives.
ROW_CHECK_EVERY = 4
Chunk = dict[str, Any]


def sse(chunk: Chunk) -> str:
    return f"data: {json.dumps(chunk, separators=(',', ':'), default=str)}\n\n"


@dataclass
class Translation:
    """The UI message chunks of one turn's stream events, in order (it keeps what is open)."""

    turn_id: str
    text: str | None = None  # the open text part's id
    reasoning: str | None = None  # the open reasoning part's id
    step: bool = False
    parts: int = 0
    tools: dict[str, str] = field(default_factory=dict)  # toolCallId -> approval id or ""
    usage: dict[str, int] = field(default_factory=dict)

    def opening(self) -> list[Chunk]:
        return [{"type": "start", "messageId": self.turn_id, "messageMetadata": self._meta()}]

    def chunks(self, event: Event) -> list[Chunk]:
        handler = getattr(self, f"_on_{event.kind}", None)
        return [] if handler is None else list(handler(event.data))

    def _meta(self, **more: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"turnId": self.turn_id, **more}
        if self.usage:
            meta["usage"] = dict(self.usage)
        return meta

    def _close(self) -> list[Chunk]:
        closed = []
        if self.text is not None:
            closed.append({"type": "text-end", "id": self.text})
            self.text = None
        if self.reasoning is not None:
            closed.append({"type": "reasoning-end", "id": self.reasoning})
            self.reasoning = None
        return closed

    def _new_id(self, kind: str) -> str:
        self.parts += 1
        return f"{kind}-{self.parts}"

    def _on_step(self, _data: dict[str, Any]) -> list[Chunk]:
        chunks = self._close()
        if self.step:
            chunks.append({"type": "finish-step"})
        self.step = True
        return [*chunks, {"type": "start-step"}]

    def _on_text(self, data: dict[str, Any]) -> list[Chunk]:
        chunks = []
        if self.reasoning is not None:
            chunks.append({"type": "reasoning-end", "id": self.reasoning})
            self.reasoning = None
        if self.text is None:
            self.text = self._new_id("text")
            chunks.append({"type": "text-start", "id": self.text})
        return [*chunks, {"type": "text-delta", "id": self.text, "delta": str(data.get("text"))}]

    def _on_reasoning(self, data: dict[str, Any]) -> list[Chunk]:
        chunks = []
        if self.text is not None:
            chunks.append({"type": "text-end", "id": self.text})
            self.text = None
        if self.reasoning is None:
            self.reasoning = self._new_id("reasoning")
            chunks.append({"type": "reasoning-start", "id": self.reasoning})
        delta = str(data.get("text"))
        return [*chunks, {"type": "reasoning-delta", "id": self.reasoning, "delta": delta}]

    def _on_tool_call(self, data: dict[str, Any]) -> list[Chunk]:
        call_id = str(data.get("tool_call_id"))
        self.tools[call_id] = ""
        shown = {"toolCallId": call_id, "toolName": str(data.get("tool")), "dynamic": True}
        return [*self._close(), {"type": "tool-input-available", **shown,
                                 "input": data.get("arguments", {})}]  # fmt: skip

    def _on_approval(self, data: dict[str, Any]) -> list[Chunk]:
        call_id, approval_id = str(data.get("tool_call_id")), str(data.get("approval_id"))
        self.tools[call_id] = approval_id
        return [{"type": "tool-approval-request", "approvalId": approval_id, "toolCallId": call_id}]

    def _on_question(self, data: dict[str, Any]) -> list[Chunk]:
        asked = {"questionId": data.get("question_id"), "callId": data.get("call_id"),
                 "toolCallId": data.get("tool_call_id")}  # fmt: skip
        return [{"type": "data-question", "id": str(data.get("question_id")), "data": asked}]

    def _on_tool_result(self, data: dict[str, Any]) -> list[Chunk]:
        call_id, status = str(data.get("tool_call_id")), data.get("status")
        error = data.get("error") or {}
        why = f"{error.get('message') or status} ({error.get('code') or status})"
        if call_id not in self.tools:  # refused before it was a call: arguments not JSON
            return [*self._close(), {"type": "tool-input-error", "toolCallId": call_id,
                                     "toolName": str(data.get("tool")), "input": None,
                                     "errorText": why, "dynamic": True}]  # fmt: skip
        approval = self.tools[call_id]
        chunks: list[Chunk] = []
        if approval and status in ("done", "denied", "failed", "running"):
            answer = {"type": "tool-approval-response", "approvalId": approval,
                      "approved": status != "denied"}  # fmt: skip
            if status == "denied" and error.get("message"):
                answer["reason"] = error["message"]
            chunks.append(answer)
        if status == "done":
            output = data.get("result")
            return [*chunks, {"type": "tool-output-available", "toolCallId": call_id,
                              "output": output, "dynamic": True}]  # fmt: skip
        if status == "denied" and approval:
            return [*chunks, {"type": "tool-output-denied", "toolCallId": call_id}]
        return [*chunks, {"type": "tool-output-error", "toolCallId": call_id, "errorText": why,
                          "dynamic": True}]  # fmt: skip

    def _on_usage(self, data: dict[str, Any]) -> list[Chunk]:
        self.usage = {k: v for k, v in data.items() if isinstance(v, int)}
        return [{"type": "message-metadata", "messageMetadata": self._meta()}]

    def _on_history(self, data: dict[str, Any]) -> list[Chunk]:
        return [{"type": "data-history", "id": "history", "data": data}]

    def _on_end(self, data: dict[str, Any]) -> list[Chunk]:
        chunks = self._close()
        if self.step:
            chunks.append({"type": "finish-step"})
            self.step = False
        status = str(data.get("status"))
        error = data.get("error")
        # A stop is the owner's, not a failure: the SDK would show an error part as one.
        if status not in (TurnStatus.SUCCEEDED, TurnStatus.STOPPED) and isinstance(error, dict):
            chunks.append({"type": "error", "errorText": str(error.get("message"))})
        reason = {"succeeded": "stop", "stopped": "other"}.get(status, "error")
        meta = self._meta(status=status)
        return [*chunks, {"type": "finish", "finishReason": reason, "messageMetadata": meta}]


def end_of(turn: Turn) -> Event:
    """The end entry of an ended turn, as its row records it."""
    end: dict[str, Any] = {"status": turn.status}
    if turn.error_code:
        end["error"] = {"code": turn.error_code, "message": turn.error_message or ""}
    return Event("0-2", "end", end)


async def chat_frames(hub: StreamHub, found: Services, job: FollowChat) -> AsyncIterator[str]:
    """The turn's UI message stream, from its start to its end and `[DONE]`."""
    translation = Translation(job.turn_id)
    for chunk in translation.opening():
        yield sse(chunk)
    subscription, events = await hub.subscribe(naming.turn_stream(job.turn_id), "0-0")
    try:
        quiet, outages = 0, hub.outages
        while True:
            for event in events:
                for chunk in translation.chunks(event):
                    yield sse(chunk)
                if event.kind in TURN_END_KINDS:
                    yield DONE
                    return
            events = await subscription.next(found.settings.stream_keepalive)
            if events:
                quiet = 0
                continue
            quiet += 1
            if hub.outages != outages or quiet % ROW_CHECK_EVERY == 0:
                outages = hub.outages
                events = await _rest_if_ended(hub, found, subscription, job.turn_id)
                if events:
                    continue
            yield KEEPALIVE
    finally:
        subscription.close()


async def _rest_if_ended(
    hub: StreamHub, found: Services, subscription: Subscription, turn_id: str
) -> list[Event]:
    """For a turn whose row says it ended: what its stream still holds, and the row's end
    when the stream lacks it; [] for a turn still open."""
    turn = await asyncio.to_thread(_row, found, turn_id)
    if turn is None or turn.status in turnstates.OPEN_STATES:
        return []
    try:
        rest = await hub.read_after(subscription.key, subscription.position)
    except OUTAGES:
        rest = []
    if any(event.kind in TURN_END_KINDS for event in rest):
        return rest
    return [*rest, end_of(turn)]


def _row(found: Services, turn_id: str) -> Turn | None:
    with found.sessions() as session:
        return session.get(Turn, turn_id)

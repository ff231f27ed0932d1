"""Agent turns on the control worker: the model answers a prompt by calling governed tools.

Every tool call the model makes goes through the broker exactly like an agent's call to
`POST /api/tools/<tool>` (the turn's id is its `turn_id`, so 50 calls per turn hold); a call
that waits for the owner (an approval, or ask_owner's question) keeps the turn waiting until it
is answered, the turn is stopped or its time runs out; a question nobody waits for any more is
cancelled. Text, reasoning and tool events stream to the turn's Redis Stream as they happen:
a `step` starts each model request, a `usage` after it sums the tokens reported so far, and a
tool call shows its arguments and its result (each up to MAX_STREAMED_TOOL_BYTES, within the
stream's cap: TurnStream.shown).

The model sees the prompts and answers of the chat's last turns, not their tool results; the
skill content the chat loaded is kept apart from that history and starts every turn
(broker/loaded.py). A context tier bounds that history (store/modelchoice.py). A source with a
minted LiteLLM key that answers 401 or 403 gets a new key once (broker/modelaccess.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import redis
import structlog
from sqlalchemy import select

from broker import loaded, questions
from broker.broker import Broker
from broker.calls import CallOutcome, CallRequest
from broker.modelaccess import LiteLLM, ModelAccess
from relay import events, heartbeat, naming
from relay.errors import ModelKeyRefused, ModelTimedOut
from relay.retention import DEFAULT_CAPS, StreamCaps
from relay.streams import TurnStream
from store import modelsettings
from store.db import CoreConnection, SessionFactory, core_connection, core_transaction, transaction
from store.deadlines import Deadline
from store.egress import Egress
from store.errors import SkillfleetError
from store.lifecycle import turns as turnstates
from store.lifecycle.calls import OPEN_STATES
from store.limits import MAX_MODEL_ROUNDS
from store.modelchoice import ModelChoice, kept_history, tokens
from store.models import Turn
from store.modelsettings import ModelConfig
from store.secrets import Sealer
from store.states import CallStatus, TurnStatus
from workers import usage
from workers.model import MIN_REQUEST_SECONDS, Reply, ToolRequest, complete
from workers.prompts import system_prompt

log = structlog.get_logger(__name__)

NO_MODEL = "No model is configured: set model.base_url and model.name in the owner's settings."
# Waits for an answered or running call are cut into slices this long to notice a stop.
WAIT_SLICE_SECONDS = 1.0
LOST_WORKER = "The control worker running this turn stopped; the turn will not run again."


@dataclass
class TurnContext:
    """What running a turn needs: the database, Redis, the broker, the key for secrets."""

    sessions: SessionFactory
    redis: redis.Redis
    broker: Broker
    sealer: Sealer
    worker: str
    time_limit: float
    caps: StreamCaps = DEFAULT_CAPS  # what a turn's stream holds and how long (settings)
    # Where the model may be: public hosts and those the operator allows (egress_allow).
    egress: Egress = field(default_factory=Egress)
    # The operator's LiteLLM, for sources on minted keys; a job's model over the default.
    litellm: LiteLLM = field(default_factory=LiteLLM)
    choice: ModelChoice | None = None

    def access(self) -> ModelAccess:
        return ModelAccess(self.sessions, self.sealer, self.egress, self.litellm)


def execute(context: TurnContext, turn_id: str) -> str | None:
    """Run a queued turn once; a redelivered message finds it taken and does nothing."""
    with core_transaction(context.sessions) as connection:
        turn = turnstates.claim(connection, turn_id, context.worker)
    if turn is None:
        log.info("turn already taken or ended; nothing to do", turn_id=turn_id)
        return None
    return run_claimed(context, turn)


def run_claimed(context: TurnContext, turn: Turn) -> TurnStatus:
    """Run a turn this worker claimed to its end and record how it ended."""
    stream = TurnStream(context.redis, turn.id, context.caps)
    # Sent with the first step's entry, in its round trip: the model is asked sooner.
    stream.hold("status", {"status": TurnStatus.RUNNING})
    loop = _Loop(context, turn, stream)
    try:
        status, error = loop.run()
    except SkillfleetError as e:
        status, error = TurnStatus.FAILED, (e.code, e.message)
    except Exception as e:  # a bug must still end the turn, never leave it running
        log.exception("turn failed", turn_id=turn.id, error_type=type(e).__name__)
        status, error = TurnStatus.FAILED, ("turn_failed", "The turn failed unexpectedly.")
    with transaction(context.sessions) as session:
        ended = turnstates.finish(
            session, turn.id, status, loop.text, loop.calls, error, loop.usage
        )
    stream.end(status, error)
    if ended and status in (TurnStatus.FAILED, TurnStatus.TIMED_OUT) and not turn.job_run_id:
        # A job's turn is reported by its job run; a chat's turn by itself.
        message = error[1] if error else f"The turn ended {status}."
        events.publish(
            context.redis, turn.owner_id, f"turn.{status}",
            turn_id=turn.id, chat_id=turn.chat_id, status=str(status), message=message,
        )  # fmt: skip
    log.info("turn ended", turn_id=turn.id, status=status, calls=loop.calls)
    return status


def reap(
    sessions: SessionFactory, client: redis.Redis, caps: StreamCaps = DEFAULT_CAPS
) -> list[str]:
    """End turns whose control worker stopped beating `interrupted`, and tell their owner."""
    reaped = []
    for turn in lost(sessions, client):
        TurnStream(client, turn.id, caps).end(TurnStatus.INTERRUPTED, ("interrupted", LOST_WORKER))
        if turn.job_run_id is None:
            events.publish(
                client, turn.owner_id, "turn.interrupted",
                turn_id=turn.id, chat_id=turn.chat_id, status="interrupted",
                message=LOST_WORKER,
            )  # fmt: skip
        reaped.append(turn.id)
    return reaped


def lost(sessions: SessionFactory, client: redis.Redis) -> list[Turn]:
    """Running turns whose worker stopped beating, moved to `interrupted`."""
    with sessions() as session:
        running = list(
            session.execute(select(Turn.id, Turn.worker).where(Turn.status == TurnStatus.RUNNING))
        )
    reaped = []
    gone = heartbeat.lost_among(client, [worker for _, worker in running if worker])
    for turn_id, worker in running:
        if worker not in gone:
            continue
        with transaction(sessions) as session:
            error = ("interrupted", LOST_WORKER)
            if turnstates.finish(session, turn_id, TurnStatus.INTERRUPTED, "", 0, error):
                found = session.get(Turn, turn_id)
                assert found is not None
                reaped.append(found)
    return reaped


Ending = tuple[TurnStatus, tuple[str, str] | None]


@dataclass
class _Loop:
    context: TurnContext
    turn: Turn
    stream: TurnStream
    text: str = ""
    calls: int = 0
    deadline: float = field(default=0.0)
    config: ModelConfig | None = None
    reminted: bool = False
    usage: dict[str, int] = field(default_factory=dict)
    client: httpx.Client | None = None  # the turn's connections to its model, while it runs

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.context.time_limit

    def run(self) -> Ending:
        access = self.context.access()
        owner_id, sealer = self.turn.owner_id, self.context.sealer
        # What the first request needs, read on one connection: the model, then the messages.
        with core_connection(self.context.sessions) as connection:
            config = modelsettings.read(connection, sealer, owner_id, self.context.choice)
            messages = [] if config is None else self._messages(connection, config)
        self.config = access.minted(config, owner_id)
        if self.config is None:
            return TurnStatus.FAILED, ("no_model", NO_MODEL)
        # The turn's requests share their connections (a TLS handshake once, not every round),
        # all held to the turn's deadline.
        deadline = Deadline(self.context.time_limit, self.deadline)
        self.client = self.context.egress.client(deadline, follow_redirects=False)
        try:
            return self._rounds(access, messages)
        finally:
            self.client.close()

    def _rounds(self, access: ModelAccess, messages: list[dict[str, Any]]) -> Ending:
        tools = self.context.broker.registry.definitions()
        for number in range(MAX_MODEL_ROUNDS):
            # The first request follows the claim: a stop asked meanwhile ends it at its first
            # chunk (the request's own stop check), a round trip sooner for every turn.
            if self._left() <= 0 or (number > 0 and self._stop_requested()):
                return self._why_stopped()
            self.stream.add("step", {})
            try:
                reply = self._ask(access, messages, tools)
            except ModelTimedOut:
                if self._should_stop():  # the request's deadline was the turn's own
                    return self._why_stopped()
                raise
            if reply.usage:
                self.usage = usage.add(self.usage, reply.usage)
                self.stream.add("usage", dict(self.usage))
            if reply.stopped:
                return self._why_stopped()
            if not reply.tool_calls:
                return TurnStatus.SUCCEEDED, None
            messages.append(reply.message())
            ending = self._answer_calls(reply, messages)
            if ending is not None:
                return ending
        message = f"The model made {MAX_MODEL_ROUNDS} requests without finishing; the turn stopped."
        return TurnStatus.FAILED, ("too_many_rounds", message)

    def _ask(
        self, access: ModelAccess, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> Reply:
        """One request to the model; a minted key it refuses is minted again, once a turn."""
        assert self.config is not None
        try:
            return self._complete(messages, tools)
        except ModelKeyRefused:
            if not self.config.virtual_key or self.reminted:
                raise
        self.reminted = True
        self.config = access.remint(self.turn.owner_id, self.config)
        log.info("model refused a minted key; minted a new one", turn_id=self.turn.id)
        return self._complete(messages, tools)

    def _complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        assert self.config is not None
        # In the turn's last moments a request has a client of its own, given its minimum.
        client = self.client if self._left() >= MIN_REQUEST_SECONDS else None
        return complete(
            self.config, messages, tools, self._on_text, self._should_stop, self._left(),
            self.context.egress, self._on_reasoning, client,
        )  # fmt: skip

    def _answer_calls(self, reply: Reply, messages: list[dict[str, Any]]) -> Ending | None:
        for request in reply.tool_calls:
            envelope = self._call(request)
            if envelope is None:
                return self._why_stopped()
            content = json.dumps(envelope, default=str)
            messages.append({"role": "tool", "tool_call_id": request.id, "content": content})
        return None

    def _messages(self, connection: CoreConnection, config: ModelConfig) -> list[dict[str, Any]]:
        """The system prompt with the loaded skills, the history the context tier leaves room
        for (oldest dropped first), and the prompt."""
        system = system_prompt(self.turn.mode, scheduled=self.turn.job_run_id is not None)
        kept = self._carried(connection)
        if kept:
            system += f"\n\n{kept}"
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        history = turnstates.history(connection, self.turn)
        tools = self.context.broker.registry.definitions_json()  # what the request sends
        fixed = tokens(system) + tokens(self.turn.prompt) + tokens(tools)
        for prompt, answer in kept_history(history, fixed, config.context_tokens):
            messages.append({"role": "user", "content": prompt})
            messages.append({"role": "assistant", "content": answer})
        messages.append({"role": "user", "content": self.turn.prompt})
        return messages

    def _carried(self, connection: CoreConnection) -> str:
        """The chat's loaded skill content, which the history's prompts and answers lack.

        In the one system message: many chat templates refuse a second one or one later on.
        """
        if self.turn.chat_id is None:
            return ""
        store = self.context.broker.store
        return loaded.carried(store, connection, self.turn.owner_id, self.turn.chat_id).text()

    def _on_text(self, text: str) -> None:
        self.text += text
        self.stream.add("text", {"text": text})

    def _on_reasoning(self, text: str) -> None:
        self.stream.add("reasoning", {"text": text})

    def _left(self) -> float:
        return self.deadline - time.monotonic()

    def _stop_requested(self) -> bool:
        try:
            return bool(self.context.redis.exists(naming.turn_stop(self.turn.id)))
        except redis.RedisError:
            return False  # can't hear a stop now; the time limit still holds

    def _should_stop(self) -> bool:
        return self._left() <= 0 or self._stop_requested()

    def _why_stopped(self) -> Ending:
        if self._stop_requested():
            return TurnStatus.STOPPED, ("stopped", "The turn was stopped.")
        limit = int(self.context.time_limit)
        return TurnStatus.TIMED_OUT, ("timed_out", f"The turn ran out of time ({limit} s).")

    def _call(self, request: ToolRequest) -> dict[str, Any] | None:
        """The envelope the model gets back; None when the turn stopped while waiting."""
        shown = {"tool_call_id": request.id, "tool": request.name}
        try:
            arguments = json.loads(request.arguments or "{}")
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            message = "HOST: the arguments were not a JSON object; send the tool's parameters."
            error = {"code": "arguments_not_json", "message": message}
            self.stream.add("tool_result", {**shown, "status": "failed", "error": error})
            return {"status": "failed", "error": error}
        self.stream.add("tool_call", {**shown, "arguments": self.stream.shown(arguments)})
        outcome = self._broker_call(request.name, arguments)
        if outcome.status == CallStatus.PENDING_APPROVAL:
            waiting = {**shown, "call_id": outcome.call_id, "approval_id": outcome.approval_id}
            self.stream.add("approval", waiting)
        if outcome.status == CallStatus.PENDING_QUESTION:
            asked = {**shown, "call_id": outcome.call_id, "question_id": outcome.question_id}
            self.stream.add("question", asked)
        if outcome.status in OPEN_STATES:
            settled = self._wait(outcome.call_id)
            if settled is None:
                self._cancel_question(outcome.call_id)
                return None
            outcome = settled
        result: dict[str, Any] = {
            **shown,
            "call_id": outcome.call_id or None,
            "status": outcome.status,
        }
        if outcome.error:
            result["error"] = outcome.error
        if outcome.result is not None:
            result["result"] = self.stream.shown(outcome.result)
        self.stream.add("tool_result", result)
        return outcome.envelope()

    def _broker_call(self, tool: str, arguments: dict[str, Any]) -> CallOutcome:
        request = CallRequest(
            tool=tool,
            arguments=arguments,
            chat_id=self.turn.chat_id if self.turn.job_run_id is None else None,
            turn_id=self.turn.id,
            job_run_id=self.turn.job_run_id,
            mode=self.turn.mode,
        )
        try:
            outcome = self.context.broker.call(self.turn.owner_id, request)
        except SkillfleetError as e:  # an unknown tool or a bad envelope: the model hears why
            return CallOutcome("", "failed", error={"code": e.code, "message": e.message})
        self.calls += 1
        return outcome

    def _cancel_question(self, call_id: str) -> None:
        """Nobody waits for the answer of a question this turn asked any more."""
        why = "the turn was stopped." if self._stop_requested() else "the turn ran out of time."
        with transaction(self.context.sessions) as session:
            questions.cancel(session, call_id, why)

    def _wait(self, call_id: str) -> CallOutcome | None:
        while not self._should_stop():
            wait = min(WAIT_SLICE_SECONDS, max(self._left(), 0.0))
            call = self.context.broker.get_call(self.turn.owner_id, call_id, wait=wait)
            if call.status not in OPEN_STATES:
                return CallOutcome.of(call)
        return None

"""The broker: every tool call is classified, decided by the policy, then run, asked or refused."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import structlog
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from broker import approvals
from broker.calls import OPEN_STATES, CallOutcome, CallRequest
from broker.classify import CallPlan, plan_call
from broker.context import Dispatcher, RecordingDispatcher, RunStarted, ToolContext
from broker.errors import (
    ApprovalVoid,
    CallNotFound,
    GrantNotOffered,
    InvalidCall,
)
from broker.grants import CHAT, JOB, add_grant, grants_for
from broker.policy import CallFacts, Decision, Policy
from broker.registry import Registry
from broker.results import shape_result, tool_failure
from store.db import SessionFactory, save, transaction
from store.errors import SkillNotFound
from store.models import Approval, Chat, ToolCall, utcnow
from store.skills import SkillStore

log = structlog.get_logger(__name__)

MAX_CALLS_PER_TURN = 50
TURN_LIMIT_RULE = "turn-call-limit"
MAX_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.1


@dataclass
class Broker:
    """Decides and runs tool calls for owners, recording each one."""

    registry: Registry
    policy: Policy
    store: SkillStore
    sessions: SessionFactory
    dispatcher: Dispatcher = field(default_factory=RecordingDispatcher)
    # Blocks until a run ends or the time runs out (Redis streams); None polls the database.
    run_waiter: Callable[[str, float], object] | None = None

    # -- a call -------------------------------------------------------------------

    def call(self, owner_id: int, request: CallRequest) -> CallOutcome:
        tool = self.registry.get(request.tool)
        request.check()
        chat = self._chat(owner_id, request.chat_id) if request.chat_id else None
        call = ToolCall(
            id=str(uuid.uuid4()),
            owner_id=owner_id,
            chat_id=chat.id if chat else None,
            job_run_id=request.job_run_id,
            turn_id=request.turn_id,
            tool=tool.name,
            tier=str(tool.tier),
            mode=request.mode,
            status="deciding",
        )
        try:
            calls_this_turn = self._count_turn(owner_id, request.turn_id)
            plan = plan_call(tool, request.arguments, self.store)
        except Exception as e:  # bad arguments are answered before any policy runs
            return self._finish(call, chat, None, error=e)
        _describe(call, plan)
        decision = self._decide(owner_id, call, chat, plan, calls_this_turn)
        if calls_this_turn > MAX_CALLS_PER_TURN and decision.action != "deny":
            # The limit holds even under an operator's policy that forgot the rule.
            decision = Decision("deny", TURN_LIMIT_RULE)
        call.rule = decision.rule
        if decision.action == "deny":
            return self._refuse(call, chat, plan, decision, calls_this_turn)
        if decision.action == "require_approval":
            return self._ask(call, plan, decision)
        return self._run(call, chat, plan)

    def _count_turn(self, owner_id: int, turn_id: str | None) -> int:
        """This call's number within its turn (1 for the first call)."""
        if turn_id is None:
            return 1
        with self.sessions() as session:
            earlier = session.scalar(
                select(func.count())
                .select_from(ToolCall)
                .where(ToolCall.owner_id == owner_id, ToolCall.turn_id == turn_id)
            )
        return (earlier or 0) + 1

    def _decide(
        self, owner_id: int, call: ToolCall, chat: Chat | None, plan: CallPlan, number: int
    ) -> Decision:
        """The policy's verdict; grants are read only when they could change it."""
        base = CallFacts(
            tool=plan.tool.name,
            tier=plan.tier,
            mode=call.mode,
            in_job=call.job_run_id is not None,
            skill_enabled=plan.skill_enabled,
            skill_locked=plan.skill_locked,
            target_is_draft=plan.target_is_draft,
            calls_this_turn=number,
        )
        key = plan.grant_key
        if key is None:
            return self.policy.decide(base)
        # A decision costs microseconds and a grants query a database round trip: when every
        # combination of grant facts gives the same verdict, the grants don't matter.
        verdicts = {self.policy.decide(case) for case in _grant_cases(base)}
        if len(verdicts) == 1:
            return verdicts.pop()
        with self.sessions() as session:
            grants = grants_for(session, owner_id, chat.id if chat else None, call.job_run_id)
        return self.policy.decide(
            replace(
                base,
                granted=key in grants.chat or key in grants.job,
                job_granted=base.in_job and key in grants.job,
                owner_allowed=key in grants.owner,
            )
        )

    def _refuse(
        self, call: ToolCall, chat: Chat | None, plan: CallPlan, decision: Decision, number: int
    ) -> CallOutcome:
        message = f"HOST: the policy refused this call (rule: {decision.rule})."
        if decision.rule is None:
            message = "HOST: no policy rule allows this call, so it is refused (default: deny)."
        elif number > MAX_CALLS_PER_TURN:
            message = (
                f"HOST: this turn already made {MAX_CALLS_PER_TURN} tool calls, the most a turn "
                f"may make (rule: {decision.rule}); finish the turn and start a new one."
            )
        call.status = "denied"
        call.error_code = "policy_denied"
        call.error_message = message
        return self._save(call, chat, counter="declined_calls")

    def _ask(self, call: ToolCall, plan: CallPlan, decision: Decision) -> CallOutcome:
        call.status = "pending_approval"
        with transaction(self.sessions) as session:
            session.add(call)
            session.flush()
            approval = approvals.create_approval(session, call, plan, decision.rule)
            call.approval_id = approval.id
        log.info("call waits for approval", call_id=call.id, tool=call.tool, rule=decision.rule)
        return CallOutcome.of(call)

    def _run(self, call: ToolCall, chat: Chat | None, plan: CallPlan) -> CallOutcome:
        context = ToolContext(
            call_id=call.id,
            owner_id=call.owner_id,
            store=self.store,
            sessions=self.sessions,
            plan=plan,
            dispatcher=self.dispatcher,
            call=call,
            chat=chat,
            job_run_id=call.job_run_id,
            turn_id=call.turn_id,
            mode=call.mode,
        )
        structlog.contextvars.bind_contextvars(call_id=call.id)
        try:
            result = plan.tool.handler(context, plan.arguments)
        except Exception as e:  # every failure becomes an envelope; ours keep their message
            outcome = self._finish(call, chat, plan, error=e)
            if getattr(e, "service_down", False):
                raise  # the service is down, not the call wrong: the API answers 503
            return outcome
        finally:
            structlog.contextvars.unbind_contextvars("call_id")
        if isinstance(result, RunStarted):
            return CallOutcome.of(call)  # the dispatcher saved the call with its run
        call.status = "done"
        call.result = shape_result(result)
        return self._save(call, chat)

    def _finish(
        self, call: ToolCall, chat: Chat | None, plan: CallPlan | None, error: Exception
    ) -> CallOutcome:
        code, message = tool_failure(error)
        if code == "tool_failed":
            log.error(
                "tool failed", call_id=call.id, tool=call.tool, error_type=type(error).__name__
            )
        call.status = "failed"
        call.error_code = code
        call.error_message = message
        if plan is not None:
            _describe(call, plan)
        return self._save(call, chat, counter="failed_calls")

    def _save(self, call: ToolCall, chat: Chat | None, counter: str | None = None) -> CallOutcome:
        call.finished_at = utcnow()
        with transaction(self.sessions) as session:
            save(session, call)
            if chat is not None and counter is not None:
                column = getattr(Chat, counter)
                session.execute(update(Chat).where(Chat.id == chat.id).values({column: column + 1}))
        return CallOutcome.of(call)

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

    # -- answers and waiting -----------------------------------------------------

    def answer(self, owner_id: int, approval_id: str, decision: str) -> Approval:
        """Apply the owner's decision; an approved call then runs with its stored arguments."""
        if decision not in approvals.DECISIONS:
            raise InvalidCall("'decision' must be approve, approve_for_chat or deny.")
        with transaction(self.sessions) as session:
            approval = approvals.claim_for_answer(session, owner_id, approval_id)
            if decision == "deny":
                approvals.deny(session, approval)
                return approval
            if decision == "approve_for_chat" and not approval.offers_chat_grant:
                raise GrantNotOffered(
                    f"{approval.tool} is never offered for a whole chat; approve it once instead."
                )
            stale = self._stale_reason(approval)
            if stale is not None:
                approvals.void(session, approval, stale)
            else:
                approval.status = approvals.ANSWERED[decision]
                approval.answered_at = utcnow()
                if decision == "approve_for_chat":
                    self._grant_for_chat(session, approval)
        if stale is not None:
            raise ApprovalVoid(stale)
        self._resume(approval)
        return approval

    def _stale_reason(self, approval: Approval) -> str | None:
        if approval.skill_name is None:
            return None
        try:
            skill = self.store.get(approval.skill_name)
        except SkillNotFound:
            return f"The skill '{approval.skill_name}' was removed after you were asked."
        if skill.hash != approval.skill_hash:
            return (
                f"The skill '{approval.skill_name}' changed after you were asked "
                f"(hash {str(approval.skill_hash)[:8]} is now {skill.hash[:8]}); the call is void."
            )
        return None

    def _grant_for_chat(self, session: Any, approval: Approval) -> None:
        """In a chat the key joins the chat's grants; in a job it is saved to the job."""
        assert approval.grant_key is not None
        if approval.chat_id is not None:
            add_grant(
                session,
                approval.owner_id,
                CHAT,
                str(approval.chat_id),
                approval.grant_key,
                chat_id=approval.chat_id,
            )
        elif approval.job_run_id is not None:
            add_grant(session, approval.owner_id, JOB, approval.job_run_id, approval.grant_key)

    def _resume(self, approval: Approval) -> None:
        """Run the approved call exactly as it was asked: the stored, normalised arguments."""
        with self.sessions() as session:
            call = session.get(ToolCall, approval.call_id)
            chat = session.get(Chat, approval.chat_id) if approval.chat_id else None
        assert call is not None
        tool = self.registry.get(approval.tool)
        try:
            plan = plan_call(tool, _replayable(approval), self.store)
        except Exception as e:
            self._finish(call, chat, None, error=e)
            return
        self._run(call, chat, plan)

    def get_call(self, owner_id: int, call_id: str, wait: float = 0) -> ToolCall:
        """The owner's call; with `wait`, after it reached an end state or the time ran out."""
        deadline = time.monotonic() + min(max(wait, 0), MAX_WAIT_SECONDS)
        while True:
            with self.sessions() as session:
                call = session.get(ToolCall, call_id)
            if call is not None and call.status == "pending_approval":
                with transaction(self.sessions) as session:
                    if approvals.expire_due(session, owner_id):
                        call = session.get(ToolCall, call_id)
            if call is None or call.owner_id != owner_id:
                raise CallNotFound(f"You have no tool call '{call_id}'.")
            left = deadline - time.monotonic()
            if call.status not in OPEN_STATES or left <= 0:
                return call
            if call.status == "running" and call.run_id and self.run_waiter is not None:
                self.run_waiter(call.run_id, left)
                deadline = min(deadline, time.monotonic() + 0.5)  # one more look, then answer
                continue
            time.sleep(POLL_SECONDS)


def _grant_cases(base: CallFacts) -> list[CallFacts]:
    """The call with every value the three grant facts can take (job grants only in a job)."""
    jobs = (False, True) if base.in_job else (False,)
    return [
        replace(base, granted=granted, job_granted=job, owner_allowed=owner)
        for granted in (False, True)
        for job in jobs
        for owner in (False, True)
    ]


def _describe(call: ToolCall, plan: CallPlan) -> None:
    call.tier = plan.tier
    call.arguments = plan.arguments
    call.grant_key = plan.grant_key
    call.node = plan.node
    if plan.skill is not None:
        call.skill_name = plan.skill.name
        call.skill_hash = plan.skill.hash


def _replayable(approval: Approval) -> dict[str, Any]:
    """The stored arguments in the shape plan_call reads (already normalised once)."""
    return dict(approval.arguments)

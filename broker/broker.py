"""The broker: every tool call is classified, decided by the policy, then run, asked or refused."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import redis
import structlog
from sqlalchemy import bindparam, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from broker import approvals, editplans, loaded, questions, traces
from broker.calls import CallOutcome, CallRequest
from broker.classify import READ_EXACTLY, CallPlan, plan_call
from broker.context import Dispatcher, RecordingDispatcher, RunStarted, ToolContext
from broker.editargs import repeated_message
from broker.errors import (
    ApprovalStale,
    CallNotFound,
    GrantNotOffered,
    InvalidCall,
    SkillNotInJob,
)
from broker.grants import CHAT, JOB, add_grant, grants_for, is_host_key
from broker.jobs import skill_allowed
from broker.policy import CallFacts, Decision, Policy
from broker.questions import QuestionAsked
from broker.registry import Registry
from broker.results import shape_result, tool_failure
from broker.runs import answer_of
from broker.turns import admit, count_into, turn_key
from relay import feed
from relay.counters import POLICY_DECISIONS
from store import tracing
from store.auditevents import audit_answer, audit_decision
from store.db import SessionFactory, core_transaction, detached, transaction
from store.errors import ServiceUnavailable, SkillChanged, SkillfleetError, SkillNotFound
from store.files import FileStore
from store.lifecycle import calls, jobruns
from store.lifecycle.calls import OPEN_STATES
from store.limits import MAX_CALLS_PER_TURN, MAX_WAIT_SECONDS
from store.models import Approval, Chat, Job, JobRun, ToolCall
from store.ownerevents import OwnerEvent
from store.skills import SkillStore
from store.states import CallStatus

log = structlog.get_logger(__name__)
SERVICE_DOWN = ("service_unavailable", "A service the call needs could not be reached.")

TURN_LIMIT_RULE = "turn-call-limit"
POLL_SECONDS = 0.1


@dataclass
class Broker:
    """Decides and runs tool calls for owners; every call's state goes through
    `store.lifecycle.calls`."""

    registry: Registry
    policy: Policy
    store: SkillStore
    sessions: SessionFactory
    dispatcher: Dispatcher = field(default_factory=RecordingDispatcher)
    # Blocks until a run ends or the time runs out (Redis streams); None polls the database.
    run_waiter: Callable[[str, float], object] | None = None
    # Adds an event to the owner's feed (relay/events.py): owner id, kind, data.
    publish: Callable[[int, str, dict[str, Any]], object] | None = None
    # Where the recorded calls' owner events go (relay/feed.py) and policy decisions are counted
    # for /metrics (relay/counters.py); None sends and counts nothing.
    redis: redis.Redis | None = None
    # The owners' files a script call may place in its run (None: no files here).
    files: FileStore | None = None

    # -- a call -------------------------------------------------------------------

    def call(self, owner_id: int, request: CallRequest) -> CallOutcome:
        """Answer one call: fail it, refuse it, ask the owner, or run it."""
        with tracing.span("skillfleet.call", tool=request.tool) as traced:
            outcome = self._call(owner_id, request)
            traced.note(call_id=outcome.call_id, status=outcome.status, run_id=outcome.run_id)
            return outcome

    def _call(self, owner_id: int, request: CallRequest) -> CallOutcome:
        tool = self.registry.get(request.tool)
        request.check()
        try:
            job = self._job(owner_id, request.job_run_id) if request.job_run_id else None
            chat, number = self._admit(owner_id, request.chat_id, request.turn_id)
        except SQLAlchemyError as e:
            raise ServiceUnavailable("The database can't be reached; try again shortly.") from e
        call = calls.new(
            {
                "id": str(uuid.uuid4()),
                "owner_id": owner_id,
                "chat_id": chat.id if chat else None,
                "job_run_id": request.job_run_id,
                "turn_id": request.turn_id,
                "tool": tool.name,
                "tier": str(tool.tier),
                "mode": request.mode,
                "arguments": request.arguments,  # as sent, until classify reads them (chat review)
            },
        )
        try:
            if request.repeated and tool.name in READ_EXACTLY:
                raise InvalidCall(repeated_message(request.repeated))
            plan = plan_call(tool, request.arguments, self.store, owner_id, self.redis, self.files)
        except SkillfleetError as e:  # a call that can only fail fails before any policy
            return self._fail(call, None, e)
        if job is not None and plan.skill is not None and not skill_allowed(job, plan.skill):
            return self._fail(call, plan, SkillNotInJob(plan.skill.name))
        _describe(call, plan)
        # A guessed chat's grants were given in other conversations: they decide nothing here.
        granting = None if request.chat_guessed else chat
        with tracing.span("skillfleet.policy", tier=plan.tier) as traced:
            decision = self._decide(owner_id, call, granting, job, plan, number)
            if number > MAX_CALLS_PER_TURN and decision.action != "deny":
                # The limit holds even under an operator's policy that forgot the rule.
                decision = Decision("deny", TURN_LIMIT_RULE)
            traced.note(decision=decision.action, rule=decision.rule)
        tracing.note(decision=decision.action, rule=decision.rule)
        call.rule = decision.rule
        count = _Count(decision.rule or "default", decision.action)
        try:
            if decision.action == "deny":
                return self._refuse(call, decision, number, count)
            if decision.action == "require_approval":
                try:
                    _before_asking(plan)
                except SkillfleetError as e:  # it could only fail: the owner is not asked
                    return self._fail(call, plan, e, count=count)
                return self._ask(call, plan, decision, count, request.chat_guessed)
            return self._run(call, chat, plan, new=True, count=count, full_loads=request.full_loads)
        finally:  # counted on its own only if no round trip of the call's carried it
            if not count.sent:
                POLICY_DECISIONS.add(self.redis, count.rule, count.action)

    def _decide(
        self,
        owner_id: int,
        call: ToolCall,
        chat: Chat | None,
        job: Job | None,
        plan: CallPlan,
        number: int,
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
            grants = grants_for(
                session, owner_id, chat.id if chat else None, job.id if job else None
            )
            if chat is not None and is_host_key(key):  # the loaded skills' allowed domains
                hosts = loaded.host_grants(self.store, session, owner_id, chat.id)
                grants = grants.with_chat(hosts)
        # Keys hold the full content hash, so a grant matches exactly one version of a skill.
        return self.policy.decide(
            replace(
                base,
                granted=key in grants.chat or key in grants.job,
                job_granted=base.in_job and key in grants.job,
                owner_allowed=key in grants.owner,
            )
        )

    def _refuse(
        self, call: ToolCall, decision: Decision, number: int, count: _Count
    ) -> CallOutcome:
        message = f"HOST: the policy refused this call (rule: {decision.rule})."
        if decision.rule is None:
            message = "HOST: no policy rule allows this call, so it is refused (default: deny)."
        elif number > MAX_CALLS_PER_TURN:
            message = (
                f"HOST: this turn already made {MAX_CALLS_PER_TURN} tool calls, the most a turn "
                f"may make (rule: {decision.rule}); finish the turn and start a new one."
            )
        call.error_code = "policy_denied"
        call.error_message = message
        return self._record(call, CallStatus.DENIED, count)

    def _ask(
        self,
        call: ToolCall,
        plan: CallPlan,
        decision: Decision,
        count: _Count,
        chat_guessed: bool = False,
    ) -> CallOutcome:
        with transaction(self.sessions) as session:
            self._count_with(session, count)
            calls.record(session, call, CallStatus.PENDING_APPROVAL)
            session.flush()
            approval = approvals.create_approval(
                session, call, plan, decision.rule, chat_guessed and call.chat_id is not None
            )
            call.approval_id = approval.id
            if plan.edit is not None:
                editplans.hold(session, call, approval, plan.edit)
            session.flush()
            audit_decision(session, call, decision.action)
        log.info("call waits for approval", call_id=call.id, tool=call.tool, rule=decision.rule)
        traces.keep(self.redis, approval.id)
        self._announce(call, approval)
        return CallOutcome.of(call)

    def _announce(self, call: ToolCall, approval: Approval) -> None:
        self._tell(
            call, "approval.waiting", approval_id=approval.id, skill_name=call.skill_name,
            message=f"{call.tool} waits for your approval.",
        )  # fmt: skip

    def _tell(self, call: ToolCall, kind: str, **data: Any) -> None:
        """Tell the owner something waits for them (push, webhooks); never fails the call."""
        if self.publish is None:
            return
        data.update(
            call_id=call.id, tool=call.tool, turn_id=call.turn_id, job_run_id=call.job_run_id
        )
        try:
            self.publish(call.owner_id, kind, data)
        except Exception as e:  # noqa: BLE001 - the call is saved; only the notice is lost
            log.warning("owner not told", call_id=call.id, kind=kind, error_type=type(e).__name__)

    def _run(
        self,
        call: ToolCall,
        chat: Chat | None,
        plan: CallPlan,
        *,
        new: bool,
        count: _Count | None = None,
        full_loads: bool = False,
    ) -> CallOutcome:
        """Run an allowed call; `new` when the call has no row yet (not asked first)."""
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
            riders=(count.add_to,) if count is not None and self.redis is not None else (),
            redis=self.redis,
            full_loads=full_loads,
        )
        ids = {"call_id": call.id}
        if call.job_run_id:
            ids["job_run_id"] = call.job_run_id
        structlog.contextvars.bind_contextvars(**ids)
        try:
            result = plan.tool.handler(context, plan.arguments)
        except ServiceUnavailable:
            if not new:
                self._end(call, CallStatus.FAILED, error=SERVICE_DOWN)
            raise  # the service is down, not the call wrong: the API answers 503
        except Exception as e:  # every failure becomes an envelope; ours keep their message
            if isinstance(e, SQLAlchemyError):
                raise ServiceUnavailable("The database can't be reached; try again.") from e
            return self._fail(call, plan, e, new=new, count=count)
        finally:
            structlog.contextvars.unbind_contextvars(*ids)
        if isinstance(result, RunStarted | QuestionAsked):
            return CallOutcome.of(call)  # the handler saved the call with its run or question
        call.result = shape_result(result)
        if plan.tool.name == "draft_skill" and isinstance(result, dict):
            self._tell(
                call,
                "review.waiting",
                skill_name=result.get("name"),
                skill_hash=result.get("hash"),
                message=f"The draft '{result.get('name')}' waits for your review.",
            )
        if new:
            return self._record(call, CallStatus.DONE, count)
        return self._end(call, CallStatus.DONE, result=call.result)

    def _fail(
        self,
        call: ToolCall,
        plan: CallPlan | None,
        error: Exception,
        *,
        new: bool = True,
        count: _Count | None = None,
    ) -> CallOutcome:
        code, message = tool_failure(error)
        if code == "tool_failed":
            log.error(
                "tool failed", call_id=call.id, tool=call.tool, error_type=type(error).__name__
            )
        call.error_code = code
        call.error_message = message
        if plan is not None:
            _describe(call, plan)
        if new:
            return self._record(call, CallStatus.FAILED, count)
        return self._end(call, CallStatus.FAILED, error=(code, message))

    def _record(
        self, call: ToolCall, status: CallStatus, count: _Count | None = None
    ) -> CallOutcome:
        """Save a new call on a bare connection (every read tool's call: no Session needed),
        then send its event with the decision's count in one round trip."""
        events: list[OwnerEvent] = []
        try:
            with core_transaction(self.sessions) as connection:
                calls.record(connection, call, status, events)
                if count is not None:
                    audit_decision(connection, call, count.action)
        except IntegrityError:
            # The chat was deleted while the call was being answered: keep the call, not the link.
            call.chat_id = None
            events.clear()
            with core_transaction(self.sessions) as connection:
                calls.record(connection, call, status, events)
                if count is not None:
                    audit_decision(connection, call, count.action)
        if self.redis is not None:
            feed.publish_all(self.redis, events, (count.add_to,) if count is not None else ())
        return CallOutcome.of(call)

    def _count_with(self, session: Any, count: _Count | None) -> None:
        """Count the decision in the round trip that publishes the session's events."""
        if count is not None and self.redis is not None:
            feed.also(session, count.add_to)

    def _end(
        self,
        call: ToolCall,
        status: CallStatus,
        *,
        result: Any = None,
        error: tuple[str, str] | None = None,
    ) -> CallOutcome:
        """End a call that already has a row (it waited for the owner)."""
        with transaction(self.sessions) as session:
            calls.answer(session, call.id, status, result=result, error=error, call=call)
        return CallOutcome.of(call)

    def _job(self, owner_id: int, job_run_id: str) -> Job:
        """The job of an active run of the owner: its grants and skills govern the call."""
        with self.sessions() as session:
            job = session.get(Job, jobruns.job_of_call(session, owner_id, job_run_id))
        assert job is not None  # a run is removed with its job
        return job

    def _admit(
        self, owner_id: int, external_id: str | None, turn_id: str | None
    ) -> tuple[Chat | None, int]:
        """The call's chat (made on its first call) and the call's number in its turn.

        A call in a chat that exists, of a turn already counted, reads the one and counts the
        other in one transaction: most calls of an agent's turn.
        """
        if external_id is not None:
            with core_transaction(self.sessions) as connection:
                found = connection.execute(
                    _CHAT_ROW, {"owner": owner_id, "external": external_id}
                ).first()
                if found is not None:
                    known = detached(Chat, found._asdict())
                    key = turn_key(turn_id, known.id)
                    number = None if key is None else count_into(connection, owner_id, key)
                    if number is not None:
                        return known, number
        chat = self._chat(owner_id, external_id) if external_id is not None else None
        return chat, admit(self.sessions, owner_id, turn_key(turn_id, chat.id if chat else None))

    def make_chat(self, session: Session, owner_id: int, external_id: str) -> None:
        """The owner's chat `external_id` made, on its first use, in the caller's transaction
        (a turn's: the chat is listed once the turn is): one INSERT that a chat already there,
        or made meanwhile by another request, turns into nothing."""
        statement = _NEW_CHAT[session.get_bind().dialect.name]
        session.connection().execute(statement, {"owner_id": owner_id, "external_id": external_id})

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

    def answer(
        self,
        owner_id: int,
        approval_id: str,
        decision: str,
        actor: str = "owner",
        reason: str | None = None,
    ) -> Approval:
        """Apply the owner's decision (`actor`, as the audit trail names who gave it); an
        approved call then runs with its stored arguments. A denial's `reason` is told to the
        call's agent."""
        with traces.answering(self.redis, approval_id, decision):
            return self._answer(owner_id, approval_id, decision, actor, reason)

    def _answer(
        self, owner_id: int, approval_id: str, decision: str, actor: str, reason: str | None
    ) -> Approval:
        if decision not in approvals.DECISIONS:
            raise InvalidCall("'decision' must be approve, approve_for_chat or deny.")
        if reason is not None and decision != "deny":
            raise InvalidCall("A reason goes with deny only.")
        with transaction(self.sessions) as session:
            approval = approvals.claim_for_answer(session, owner_id, approval_id)
            if decision == "deny":
                approvals.deny(session, approval, reason)
                editplans.settle(session, approval.id, editplans.DENIED)
                session.flush()
                audit_answer(session, approval, decision, actor)
                return approval
            if decision == "approve_for_chat" and approvals.grant_note(approval) is not None:
                raise GrantNotOffered(approvals.GUESSED_CHAT)
            if decision == "approve_for_chat" and not approval.offers_chat_grant:
                raise GrantNotOffered(
                    f"{approval.tool} ({approval.tier}) is never offered for a whole chat; "
                    "approve it once instead."
                )
            stale = self._stale_reason(approval)
            if stale is not None:
                approvals.make_stale(session, approval, stale)
                editplans.settle(session, approval.id, editplans.STALE)
            else:
                approvals.approve(approval, decision)
                if decision == "approve_for_chat":
                    self._grant_for_chat(session, approval)
            session.flush()
            audit_answer(session, approval, decision, actor, stale)
        if stale is not None:
            if approval.tool == "edit_skill":  # the edit was made against the old content
                raise SkillChanged(f"{stale} Nothing was written.")
            raise ApprovalStale(stale)
        outcome = self._resume(approval)
        error = outcome.error or {}
        if approval.tool == "edit_skill" and error.get("code") == "skill_changed":
            # The skill moved between the check above and the write: the owner hears it too.
            with transaction(self.sessions) as session:
                approvals.void_after_approval(session, approval)
                editplans.settle(session, approval.id, editplans.STALE)
            raise SkillChanged(error.get("message", "").removeprefix("HOST: "))
        return approval

    def _stale_reason(self, approval: Approval) -> str | None:
        """Why the approved call may no longer run: its skill is not the exact one shown."""
        if approval.skill_name is None:
            return None
        try:
            skill = self.store.get(approval.owner_id, approval.skill_name)
        except SkillNotFound:
            return f"The skill '{approval.skill_name}' was removed after you were asked."
        if skill.hash != approval.skill_hash and not approvals.pins(approval):
            return (
                f"The skill '{approval.skill_name}' changed after you were asked "
                f"(hash {str(approval.skill_hash)[:8]} is now {skill.hash[:8]}); the call is void."
            )
        return None

    def _grant_for_chat(self, session: Any, approval: Approval) -> None:
        """In a chat the key joins the chat's grants; in a job it is saved to the job (not the
        run), so the job's next runs don't ask again."""
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
            run = session.get(JobRun, approval.job_run_id)
            if run is not None:  # its job was deleted meanwhile: nothing left to grant to
                add_grant(session, approval.owner_id, JOB, run.job_id, approval.grant_key)

    def _resume(self, approval: Approval) -> CallOutcome:
        """Run the approved call exactly as it was asked: the stored, normalised arguments."""
        with self.sessions() as session:
            call = session.get(ToolCall, approval.call_id)
            chat = session.get(Chat, approval.chat_id) if approval.chat_id else None
        assert call is not None
        tool = self.registry.get(approval.tool)
        try:
            plan = plan_call(
                tool, _replayable(approval), self.store, approval.owner_id, self.redis, self.files
            )
        except SkillfleetError as e:
            return self._fail(call, None, e, new=False)
        if plan.skill is not None and plan.skill.hash != approval.skill_hash:
            # The skill changed between the stale check and now: run nothing.
            error = ("skill_changed", "The skill changed after you approved; nothing ran.")
            return self._end(call, CallStatus.FAILED, error=error)
        return self._run(call, chat, plan, new=False)

    def outcome(self, owner_id: int, call_id: str, wait: float, run_id: str | None) -> CallOutcome:
        """The envelope of a call this request just made, once it ended or `wait` ran out.

        A call that started a run is answered from its run's end entry, which carries the run's
        end as the worker recorded it (every `?wait=` run: no database read); when the entry
        has none, it is read by its envelope's columns, a plain SELECT.
        """
        deadline = time.monotonic() + min(max(wait, 0), MAX_WAIT_SECONDS)
        if run_id is not None and self.run_waiter is not None and wait > 0:
            end = self.run_waiter(run_id, deadline - time.monotonic())
            if isinstance(end, dict):
                answer = answer_of(end)
                error = answer.get("error")
                return CallOutcome(
                    call_id, answer["status"], answer.get("result"), error, None, run_id
                )
            with self.sessions() as session:
                row = session.execute(_ENVELOPE, {"call_id": call_id, "owner_id": owner_id}).first()
            # Ended, or still running with no time left (the grace before a hand-off ran out):
            # the row answers as it stands, with no second read.
            if row is not None and (row.status not in OPEN_STATES or deadline <= time.monotonic()):
                return CallOutcome.of(row)
        left = max(0.0, deadline - time.monotonic())
        return CallOutcome.of(self.get_call(owner_id, call_id, wait=left))

    def withdraw(self, owner_id: int, call_id: str) -> Approval | None:
        """The agent stopped waiting for the owner's answer to its call: its pending approval
        is withdrawn (the call ends expired, approval_withdrawn) and can no longer be answered.
        None when the call has none pending (answered, expired or withdrawn already)."""
        with transaction(self.sessions) as session:
            approval = approvals.withdraw(session, owner_id, call_id)
            if approval is not None:
                editplans.settle(session, approval.id, editplans.EXPIRED)
        if approval is not None:
            log.info("approval withdrawn", call_id=call_id, approval_id=approval.id)
        return approval

    def get_call(self, owner_id: int, call_id: str, wait: float = 0) -> ToolCall:
        """The owner's call; with `wait`, after it reached an end state or the time ran out."""
        deadline = time.monotonic() + min(max(wait, 0), MAX_WAIT_SECONDS)
        while True:
            with self.sessions() as session:
                call = session.get(ToolCall, call_id)
            if call is not None and call.status in _EXPIRING:
                with transaction(self.sessions) as session:
                    if _EXPIRING[call.status](session, owner_id):
                        call = session.get(ToolCall, call_id)
            if call is None or call.owner_id != owner_id:
                raise CallNotFound(f"You have no tool call '{call_id}'.")
            left = deadline - time.monotonic()
            if call.status not in OPEN_STATES or left <= 0:
                return call
            if call.status == CallStatus.RUNNING and call.run_id and self.run_waiter is not None:
                self.run_waiter(call.run_id, left)
                deadline = min(deadline, time.monotonic() + 0.5)  # one more look, then answer
                continue
            time.sleep(POLL_SECONDS)


# What ends a call waiting for the owner once nobody answered in time.
_EXPIRING: dict[str, Callable[[Any, int], int]] = {
    CallStatus.PENDING_APPROVAL: approvals.expire_due,
    CallStatus.PENDING_QUESTION: questions.expire_due,
}
_CALLS = ToolCall.__table__.c
_ENVELOPE = select(
    _CALLS.id,
    _CALLS.status,
    _CALLS.result,
    _CALLS.error_code,
    _CALLS.error_message,
    _CALLS.approval_id,
    _CALLS.run_id,
).where(_CALLS.id == bindparam("call_id"), _CALLS.owner_id == bindparam("owner_id"))


@dataclass
class _Count:
    """A call's policy decision for /metrics, counted once: in the round trip that publishes
    the recorded call's events, or on its own when nothing recorded it (a run, an outage)."""

    rule: str
    action: str
    sent: bool = False

    def add_to(self, pipe: Any) -> None:
        POLICY_DECISIONS.add_to(pipe, self.rule, self.action)
        self.sent = True


def _before_asking(plan: CallPlan) -> None:
    """The checks a tool keeps for calls its owner would be asked about (read_web_page
    resolves its host): an error when the call could only fail."""
    check = getattr(plan.tool.handler, "before_asking", None)
    if check is not None:
        check(plan.arguments)


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
    tracing.note(
        call_id=call.id, tier=call.tier, node=call.node, skill=call.skill_name,
        skill_hash=call.skill_hash,
    )  # fmt: skip


def _replayable(approval: Approval) -> dict[str, Any]:
    """The stored arguments in the shape plan_call reads (already normalised once)."""
    return dict(approval.arguments)


_CHATS = Chat.__table__
_NEW_CHAT = {
    name: dialect.insert(_CHATS).on_conflict_do_nothing(index_elements=["owner_id", "external_id"])
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}
# Every column of the owner's chat of an external id (built once, as a call reads it).
_CHAT_ROW = select(*_CHATS.c).where(
    _CHATS.c.owner_id == bindparam("owner"), _CHATS.c.external_id == bindparam("external")
)

"""The broker's dispatcher: an allowed run_skill_script call becomes a queued run, sent to its
queue after checking that a live worker serves it. The message carries the run's id only."""

from __future__ import annotations

import time
import uuid

import kombu.exceptions
import redis
from celery import Celery

from broker.classify import CallPlan
from broker.commands import EXECUTION, Command
from broker.context import RunStarted, ToolContext
from broker.fleet import nodes_hint
from broker.runs import abandon
from relay import dispatch, feed, heartbeat, naming
from relay.errors import BackendUnavailable, NoRunner
from store import ownerevents
from store.auditevents import ALLOW, audit_decision
from store.db import SessionFactory, core_transaction, insert_row
from store.lifecycle import calls
from store.lifecycle import runs as runstates
from store.models import Run, ToolCall, utcnow
from store.names import AUTO
from store.ownerevents import OwnerEvent
from store.packagestore import PackageStore
from store.states import CallStatus

EXECUTE_TASK = "skillfleet.execute_run"
LIVE_CHECK_SECONDS = 1.0
UNREACHABLE = "The run queue (Redis) can't be reached, so the script was not started."
SANDBOX_FIX = (
    "start `skillfleet worker sandbox` on an x86_64 host with KVM, or on a host with Docker "
    "with SKILLFLEET_SANDBOX_ISOLATION=container (hardened containers instead of micro-VMs)"
)
NO_SANDBOX = f"No sandbox worker is running, so sandbox skills can't run: {SANDBOX_FIX}."


class CeleryDispatcher:
    """Checks that a live worker serves the run's queue, then queues the run by its id."""

    def __init__(
        self,
        sessions: SessionFactory,
        client: redis.Redis,
        celery: Celery,
        timeout: int,
        packages: PackageStore,
    ) -> None:
        self.sessions = sessions
        self.client = client
        self.celery = celery
        self.timeout = timeout
        self.packages = packages
        self._live: dict[str, float] = {}  # queue -> until when a live worker is assumed

    def _served(self, queue: str) -> bool:
        """A live worker beats for `queue`; a yes is remembered for LIVE_CHECK_SECONDS.

        A worker that died within that second is no different from one that dies right after
        the check: its run is answered `interrupted` by the reaper, never run twice.
        """
        now = time.monotonic()
        if self._live.get(queue, 0.0) > now:
            return True
        try:
            alive = heartbeat.live_workers(self.client, queue)
        except redis.RedisError as e:
            raise BackendUnavailable(UNREACHABLE) from e
        if alive:
            self._live[queue] = now + LIVE_CHECK_SECONDS
        return bool(alive)

    def dispatch(self, context: ToolContext) -> RunStarted:
        plan = context.plan
        execution = plan.execution or EXECUTION
        queue = naming.queue_for(execution, plan.node)
        if not self._served(queue):
            raise NoRunner(self._no_runner(context, execution))
        if plan.skill is not None:
            # Built now, while this hash is current: the runner may fetch it after an edit.
            self.packages.ensure_built(plan.skill)
        run = new_run(plan, context.call, self.timeout)
        context.call.run_id = run.id
        # The call's and the run's rows are committed first; only then does the message leave,
        # so the worker that takes it reads a saved run at once (broker.runs.claim reads once),
        # and a save that fails sends nothing. The call is saved with its run: the worker
        # answers it.
        events: list[OwnerEvent] = []
        with core_transaction(self.sessions) as connection:
            decided = context.call.status == CallStatus.DECIDING
            if decided:
                calls.record(connection, context.call, CallStatus.RUNNING, events)
            else:  # it waited for the owner, who approved it (the approval is audited)
                calls.answer(
                    connection,
                    context.call.id,
                    CallStatus.RUNNING,
                    run_id=run.id,
                    events=events,
                    call=context.call,
                )
            insert_row(connection, run)
            if decided:
                audit_decision(connection, context.call, ALLOW)
        refused = self._send(run.id, queue)
        if refused is not None:
            # Claimed already (the reply was lost, not the message)? Then abandon changes nothing.
            abandon(self.sessions, run.id, UNREACHABLE)
            raise BackendUnavailable(UNREACHABLE) from refused
        # The owner's events only once the rows are saved, with the decision's count.
        ownerevents.add_run_state(events, run)
        feed.publish_all(self.client, events, context.riders)
        return RunStarted(run.id)

    def _no_runner(self, context: ToolContext, execution: str) -> str:
        """Why no worker takes the run, and where the owner's calls may run instead."""
        skill = context.plan.skill
        if execution == naming.SANDBOX:
            return _no_sandbox_message(self.client)
        hint = nodes_hint(self.sessions, self.client, context.owner_id)
        if execution == naming.SPARK:
            if skill is not None and skill.execution == AUTO:
                return f"HOST: no Spark worker is running now; name a node to run it on ({hint})."
            return "No Spark worker is running, so spark skills can't run now."
        return (
            f"HOST: no node agent named '{context.plan.node}' is running, so nothing can run "
            f"there now; {hint}."
        )

    def _send(self, run_id: str, queue: str) -> Exception | None:
        """The run's task message (after Flower's "sent" event, when there is one); what kept
        it from its queue, if anything did."""
        try:
            dispatch.send_run(self.celery, EXECUTE_TASK, run_id, queue)
        except (redis.RedisError, kombu.exceptions.OperationalError) as e:
            return e  # a refusal, or the connection: whether the message got there is unknown
        return None


def new_run(plan: CallPlan, call: ToolCall, timeout: int) -> Run:
    """A queued Run for an allowed call's plan (not saved yet), in the call's chat."""
    if plan.command is not None:
        return _command_run(plan.command, call, timeout)
    assert plan.skill is not None and plan.script is not None
    execution = plan.execution or plan.skill.execution
    return runstates.new(
        {
            "id": str(uuid.uuid4()),
            "call_id": call.id,
            "owner_id": call.owner_id,
            "chat_id": call.chat_id,
            "skill_name": plan.skill.name,
            "skill_hash": plan.skill.hash,
            "script": plan.script,
            "arguments": plan.script_arguments,
            "execution": execution,
            "queue": naming.queue_for(execution, plan.node),
            "node": plan.node if execution == "node" else None,
            "network": plan.network,
            "args": list(plan.args) if plan.args is not None else None,
            "input_files": plan.files or None,
            "timeout_seconds": timeout,
            "created_at": utcnow(),
        },
    )


def _command_run(command: Command, call: ToolCall, timeout: int) -> Run:
    """A queued run of run_command's argv on its node; it never outlasts the run timeout."""
    return runstates.new(
        {
            "id": str(uuid.uuid4()),
            "call_id": call.id,
            "owner_id": call.owner_id,
            "chat_id": call.chat_id,
            "command": list(command.argv),
            "arguments": {},
            "execution": EXECUTION,
            "network": "none",
            "queue": naming.node_queue(command.node),
            "node": command.node,
            "timeout_seconds": min(command.timeout or timeout, timeout),
            "created_at": utcnow(),
        },
    )


def _no_sandbox_message(client: redis.Redis) -> str:
    """NO_SANDBOX, or, when a sandbox worker runs but serves nothing (it could not start a
    micro-VM, say), the reason its heartbeat gives."""
    try:
        found = [
            worker
            # The sandbox workers' own heartbeats, not the fleet's.
            for worker in heartbeat.workers_named(client, [naming.SANDBOX])
            if worker["queue"] == naming.SANDBOX and worker["alive"] and worker["serving"] == "0"
        ]
    except redis.RedisError:
        return NO_SANDBOX
    if not found:
        return NO_SANDBOX
    worker = found[0]
    reason = str(worker.get("reason") or "it gave no reason").rstrip(".")
    return (
        f"The sandbox worker on {worker['host']} runs but serves nothing, so sandbox skills "
        f"can't run: {reason}. To run them, {SANDBOX_FIX}."
    )

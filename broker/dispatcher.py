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
from broker.runs import abandon
from relay import dispatch, feed, heartbeat, naming
from relay.errors import BackendUnavailable, NoRunner
from store import ownerevents
from store.db import SessionFactory, core_transaction, insert_row
from store.lifecycle import calls
from store.lifecycle import runs as runstates
from store.limits import RUN_SAVE_SECONDS
from store.models import Run, utcnow
from store.ownerevents import OwnerEvent
from store.packagestore import PackageStore
from store.states import CallStatus

EXECUTE_TASK = "skillfleet.execute_run"
LIVE_CHECK_SECONDS = 1.0
UNREACHABLE = "The run queue (Redis) can't be reached, so the script was not started."
SAVE_TOO_SLOW = "The database took too long to save the run, so the script was not started."
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
        execution = plan.skill.execution if plan.skill is not None else EXECUTION
        queue = naming.queue_for(execution, plan.node)
        if not self._served(queue):
            raise NoRunner(_no_runner_message(self.client, execution, plan.node))
        if plan.skill is not None:
            # Built now, while this hash is current: the runner may fetch it after an edit.
            self.packages.ensure_built(plan.skill)
        run = new_run(plan, context.call_id, context.owner_id, self.timeout)
        context.call.run_id = run.id
        # The message goes out first and the rows are saved while it travels: the worker claims
        # the run only once they are there (broker.runs.claim waits for them), and finds nothing
        # to run if they never are. The call is saved with its run: the worker answers it.
        refused = self._send(run.id, queue)
        sent_at = time.monotonic()
        events: list[OwnerEvent] = []
        with core_transaction(self.sessions) as connection:
            if context.call.status == CallStatus.DECIDING:
                calls.record(connection, context.call, CallStatus.RUNNING, events)
            else:  # it waited for the owner, who approved it
                calls.answer(
                    connection,
                    context.call.id,
                    CallStatus.RUNNING,
                    run_id=run.id,
                    events=events,
                    call=context.call,
                )
            insert_row(connection, run)
            if time.monotonic() - sent_at > RUN_SAVE_SECONDS:
                # Its worker may have stopped waiting for the rows: saved now, it would stay
                # queued for good. Rolled back, the message finds nothing to run.
                raise BackendUnavailable(SAVE_TOO_SLOW)
        if refused is not None:
            # Claimed already (the reply was lost, not the message)? Then abandon changes nothing.
            abandon(self.sessions, run.id, UNREACHABLE)
            raise BackendUnavailable(UNREACHABLE) from refused
        # The owner's events only once the rows are saved, with the decision's count.
        ownerevents.add_run_state(events, run)
        feed.publish_all(self.client, events, context.riders)
        return RunStarted(run.id)

    def _send(self, run_id: str, queue: str) -> Exception | None:
        """The run's task message (after Flower's "sent" event, when there is one); what kept
        it from its queue, if anything did."""
        try:
            dispatch.send_run(self.celery, EXECUTE_TASK, run_id, queue)
        except (redis.RedisError, kombu.exceptions.OperationalError) as e:
            return e  # a refusal, or the connection: whether the message got there is unknown
        return None


def new_run(plan: CallPlan, call_id: str, owner_id: int, timeout: int) -> Run:
    """A queued Run for an allowed call's plan (not saved yet)."""
    if plan.command is not None:
        return _command_run(plan.command, call_id, owner_id, timeout)
    assert plan.skill is not None and plan.script is not None
    execution = plan.skill.execution
    return runstates.new(
        {
            "id": str(uuid.uuid4()),
            "call_id": call_id,
            "owner_id": owner_id,
            "skill_name": plan.skill.name,
            "skill_hash": plan.skill.hash,
            "script": plan.script,
            "arguments": plan.script_arguments,
            "execution": execution,
            "queue": naming.queue_for(execution, plan.node),
            "node": plan.node if execution == "node" else None,
            "network": plan.network,
            "timeout_seconds": timeout,
            "created_at": utcnow(),
        },
    )


def _command_run(command: Command, call_id: str, owner_id: int, timeout: int) -> Run:
    """A queued run of run_command's argv on its node; it never outlasts the run timeout."""
    return runstates.new(
        {
            "id": str(uuid.uuid4()),
            "call_id": call_id,
            "owner_id": owner_id,
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


def _no_runner_message(client: redis.Redis, execution: str, node: str | None) -> str:
    if execution == naming.SANDBOX:
        return _no_sandbox_message(client)
    if execution == naming.SPARK:
        return "No Spark worker is running, so spark skills can't run now."
    return f"HOST: no node agent named '{node}' is running; check the node name."


def _no_sandbox_message(client: redis.Redis) -> str:
    """NO_SANDBOX, or, when a sandbox worker runs but serves nothing (it could not start a
    micro-VM, say), the reason its heartbeat gives."""
    try:
        found = [
            worker
            for worker in heartbeat.workers(client)
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

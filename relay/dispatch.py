"""Turning an allowed run_skill_script call into a Run row and one Celery task."""

from __future__ import annotations

import kombu.exceptions
import redis
from celery import Celery

from broker import callstate
from broker.callstate import CallStatus
from broker.context import RunStarted, ToolContext
from relay import feed, heartbeat, naming
from relay.errors import BackendUnavailable, NoRunner
from store.db import SessionFactory, transaction
from store.packagestore import PackageStore
from store.runs import abandon, new_run

EXECUTE_TASK = "skillfleet.execute_run"
UNREACHABLE = "The run queue (Redis) can't be reached, so the script was not started."
NO_SANDBOX = "No server can run sandboxed skills: Hyperlight needs an x86_64 server with KVM."


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

    def dispatch(self, context: ToolContext) -> RunStarted:
        plan = context.plan
        assert plan.skill is not None
        queue = naming.queue_for(plan.skill.execution, plan.node)
        try:
            alive = heartbeat.live_workers(self.client, queue)
        except redis.RedisError as e:
            raise BackendUnavailable(UNREACHABLE) from e
        if not alive:
            raise NoRunner(_no_runner_message(plan.skill.execution, plan.node))
        # Built now, while this hash is current: the runner may fetch it after an edit.
        self.packages.ensure_built(plan.skill)
        run = new_run(plan, context.call_id, context.owner_id, self.timeout)
        # The call is saved with its run before the task is sent: the worker answers it.
        context.call.run_id = run.id
        with transaction(self.sessions) as session:
            if context.call.status == CallStatus.DECIDING:
                callstate.record(session, context.call, CallStatus.RUNNING)
            else:  # it waited for the owner, who approved it
                callstate.answer(session, context.call.id, CallStatus.RUNNING, run_id=run.id)
                context.call.status = CallStatus.RUNNING
            session.add(run)
            feed.note_run(session, run)
        try:
            # Flower shows the shadow name: what the task is, never the script's arguments.
            self.celery.send_task(
                EXECUTE_TASK, args=[run.id], queue=queue, shadow=f"run {run.id} on {queue}"
            )
        except (redis.RedisError, kombu.exceptions.OperationalError) as e:
            abandon(self.sessions, run.id, UNREACHABLE)
            raise BackendUnavailable(UNREACHABLE) from e
        return RunStarted(run.id)


def _no_runner_message(execution: str, node: str | None) -> str:
    if execution == naming.SANDBOX:
        return NO_SANDBOX
    if execution == naming.SPARK:
        return "No Spark worker is running, so spark skills can't run now."
    return f"HOST: no node agent named '{node}' is running; check the node name."

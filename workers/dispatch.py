"""Turning an allowed run_skill_script call into a Run row and one Celery task."""

from __future__ import annotations

import time

import kombu.exceptions
import redis
from celery import Celery

from broker import callstate
from broker.callstate import CallStatus
from broker.context import RunStarted, ToolContext
from store.db import SessionFactory, transaction
from store.packagestore import PackageStore
from workers import feed, heartbeat, naming
from workers.errors import BackendUnavailable, NoRunner
from workers.runs import abandon, new_run

EXECUTE_TASK = "skillfleet.execute_run"
LIVE_CHECK_SECONDS = 1.0
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
        assert plan.skill is not None
        queue = naming.queue_for(plan.skill.execution, plan.node)
        if not self._served(queue):
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
                EXECUTE_TASK,
                args=[run.id],
                queue=queue,
                shadow=f"run {run.id} on {queue}",
                ignore_result=True,  # else Celery subscribes to a result channel per run
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

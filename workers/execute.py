"""Executing one run on this worker: claim it, fetch its exact skill, run, record, announce."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import redis
import structlog

from broker.errors import SchemaMismatch
from broker.runs import (
    ANNOUNCED,
    Outcome,
    announce,
    claim,
    finish,
    observe_end,
    observe_start,
)
from relay import feed, naming
from relay.errors import RunError
from relay.heartbeat import Instance
from relay.retention import DEFAULT_CAPS, StreamCaps
from relay.streams import RunStream
from store import tracing
from store.commandline import CommandLineError
from store.db import SessionFactory
from store.errors import StoreError
from store.models import RunFacts
from store.ownerevents import OwnerEvent
from store.states import RunStatus
from workers.runfiles import RunFiles
from workers.runners.base import CancelCheck, CommandRunner, Job, Runner, script_argv
from workers.runners.interpreters import needs_package
from workers.secrets import run_secrets

log = structlog.get_logger(__name__)

REDIS_LOST = "Redis went away while the script ran; it was stopped and will not run again."


class Packages(Protocol):
    """Where a worker gets the verified files of exactly one skill hash."""

    def using(self, name: str, skill_hash: str) -> AbstractContextManager[Path]: ...

    def secrets(self, run_id: str) -> dict[str, str]: ...


@dataclass
class WorkerContext:
    """What a worker process holds for the life of the process."""

    sessions: SessionFactory
    redis: redis.Redis
    instance: Instance
    runner: Runner
    packages: Packages
    caps: StreamCaps = DEFAULT_CAPS  # what a run's stream holds and how long (settings)
    files: RunFiles | None = None  # the channel for runs' files (None: no files travel)


def execute(context: WorkerContext, run_id: str) -> str | None:
    """Run `run_id` once; a redelivered message finds it claimed, and one whose run was never
    saved (the API commits it before it sends) finds nothing: both do nothing."""
    events: list[OwnerEvent] = []
    run = claim(context.sessions, run_id, context.instance.id, events)
    if run is None:
        log.info("run already claimed or ended, or never saved; nothing to do", run_id=run_id)
        return None
    tracing.note(call_id=run.call_id, skill=run.skill_name, skill_hash=run.skill_hash)
    stream = RunStream(context.redis, run_id, context.caps)
    # The owner hears "running" with the run's first stream entries: the script starts sooner.
    stream.also(lambda pipe: feed.add_to(pipe, events))
    stream.also(lambda pipe: observe_start(pipe, run))
    try:
        if run.command is not None:
            outcome = _run_command(context, run, run.command, stream)
        else:
            assert run.skill_name is not None and run.skill_hash is not None
            # `using` keeps a sync from removing this hash while the script runs.
            with context.packages.using(run.skill_name, run.skill_hash) as folder:
                outcome = _run(context, run, folder, stream)
    except RunError as e:
        outcome = Outcome(RunStatus.FAILED, None, "", e.message, e.message, e.code)
    return _end(context, stream, run_id, outcome)


def _run_command(
    context: WorkerContext, run: RunFacts, command: list[str], stream: RunStream
) -> Outcome:
    """run_command's argv as it was approved, in a working directory of its own that goes
    with the run; only a node runner runs commands (they are sent to node queues only)."""
    runner = context.runner
    if not isinstance(runner, CommandRunner):
        message = "Commands run on node workers only; this worker runs skill scripts."
        return Outcome(RunStatus.FAILED, None, "", message, message)
    job = Job(
        run_id=run.id, skill_name="", skill_hash="", script="", arguments={},
        timeout=run.timeout_seconds, command=tuple(command), files=context.files,
    )  # fmt: skip
    return _guarded(job, lambda cancelled: runner.run_command(job, stream, cancelled), context)


def _run(context: WorkerContext, run: RunFacts, folder: Path, stream: RunStream) -> Outcome:
    assert run.skill_name is not None and run.skill_hash is not None and run.script is not None
    try:
        argv = (
            tuple(run.args)  # the call's own command line
            if run.args is not None
            else script_argv(folder, run.skill_name, run.skill_hash, run.script, run.arguments)
        )
    except CommandLineError as e:  # the call was checked against the same rules: a safety net
        return Outcome(RunStatus.FAILED, None, "", e.message, e.message, SchemaMismatch.code)
    except (StoreError, OSError) as e:  # the verified copy's SKILL.md can't be read
        message = f"The skill's SKILL.md could not be read for the script's command line: {e}"
        return Outcome(RunStatus.FAILED, None, "", message, message)
    # Only for a skill that declares some; RunError (secret_missing) ends the run unstarted.
    secrets = run_secrets(context.packages, folder, run.skill_name, run.skill_hash, run.id)
    job = Job(
        run_id=run.id,
        skill_name=run.skill_name,
        skill_hash=run.skill_hash,
        script=run.script,
        arguments=run.arguments,
        timeout=run.timeout_seconds,
        network=run.network,
        execution=run.execution,
        argv=argv,
        as_module=needs_package(folder, run.skill_hash, run.script),
        secrets=secrets,
        inputs=run.input_files or {},
        files=context.files,
    )
    return _start(context, job, folder, stream)


def _start(context: WorkerContext, job: Job, folder: Path, stream: RunStream) -> Outcome:
    return _guarded(
        job, lambda cancelled: context.runner.run(job, folder, stream, cancelled), context
    )


def _guarded(job: Job, start: Callable[[CancelCheck], Outcome], context: WorkerContext) -> Outcome:
    """The runner runs the job; whatever goes wrong, the run gets an end."""
    cancel_key = naming.run_cancel(job.run_id)
    try:
        return start(lambda: bool(context.redis.exists(cancel_key)))
    except RunError as e:  # refused before the script started (e.g. PackageUnverified)
        return Outcome(RunStatus.FAILED, None, "", e.message, e.message, e.code)
    except (redis.ConnectionError, redis.TimeoutError) as e:
        # Output and cancel requests travel through Redis; without it the run can't be watched
        # or stopped, so it is stopped here and answered like a lost worker's run.
        log.warning("redis lost during the run; script stopped", run_id=job.run_id, error=str(e))
        return Outcome(RunStatus.INTERRUPTED, None, "", REDIS_LOST, REDIS_LOST)
    except Exception as e:  # a runner bug must still end the run, never leave it running
        log.exception("runner failed", run_id=job.run_id, error_type=type(e).__name__)
        message = "The runner failed before the script ended."
        return Outcome(RunStatus.FAILED, None, "", message, message)


def _end(context: WorkerContext, stream: RunStream, run_id: str, outcome: Outcome) -> str:
    # The row first: whoever wakes on the exit event must find the final state.
    events: list[OwnerEvent] = []
    ended = finish(context.sessions, run_id, outcome, context.runner.isolation, events)
    stream.also(lambda pipe: feed.add_to(pipe, events))  # in the exit's round trip
    if ended is not None:
        finished = ended.run
        stream.also(lambda pipe: observe_end(pipe, finished))
    details = {"code": outcome.code} if outcome.code else {}
    # The run's end, for whoever waits for the call: the API makes its answer from it.
    end = ended.end if ended is not None else None
    try:
        stream.exit(outcome.status, outcome.exit_code, end, error=outcome.error, **details)
    except (redis.ConnectionError, redis.TimeoutError):
        # The row holds the end; SSE clients read it from there when the stream lacks it.
        log.warning("run ended without its exit event in the stream", run_id=run_id)
    if ended and outcome.status in ANNOUNCED:
        announce(context.sessions, context.redis, run_id)
    # A line costs a run 0.25 ms of the worker's CPU (its code is cold after the script): every
    # run's end is in its row and stream, so only the ends worth a look are logged at INFO.
    say = log.debug if outcome.status == RunStatus.SUCCEEDED else log.info
    say("run ended", run_id=run_id, status=outcome.status, exit_code=outcome.exit_code)
    return outcome.status

"""A run's life around its state (store/lifecycle/runs.py): the worker's claim and finish,
the tool call a run answers, cancelling, reaping and announcing ends to the owner.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.results import shape_result
from relay import events, feed, heartbeat, naming
from relay.errors import RunFinished, RunNotFound
from relay.retention import DEFAULT_CAPS, StreamCaps
from relay.streams import RunStream, collected_output
from store import ownerevents
from store.db import (
    CoreConnection,
    SessionFactory,
    core_connection,
    core_transaction,
    transaction,
)
from store.lifecycle import calls
from store.lifecycle import runs as lifecycle
from store.limits import KEPT_OUTPUT_CHARS, RUN_SAVE_WAIT_SECONDS
from store.models import Run, RunFacts
from store.ownerevents import OwnerEvent
from store.states import CallStatus, RunStatus

# Ends the owner hears about (push, webhooks).
ANNOUNCED = (RunStatus.FAILED, RunStatus.TIMED_OUT, RunStatus.INTERRUPTED)


@dataclass(frozen=True)
class Outcome:
    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    error: str | None = None
    code: str | None = None  # the stable code of an error that ended the run before its script


def abandon(sessions: SessionFactory, run_id: str, message: str) -> None:
    """End a queued run that could not be sent to its queue, and its call with it: nothing
    will ever pick the run up, so neither may stay open."""
    with transaction(sessions) as session:
        run = lifecycle.abandon(session, run_id, message)
        if run is None:
            return
        ownerevents.note_run(session, run)
        if run.call_id is not None:
            error = ("service_unavailable", message)
            calls.answer(session, run.call_id, CallStatus.FAILED, error=error)


def _facts(row: dict[str, Any]) -> RunFacts:
    """A run's row as read back by the claim or the finish, its columns as attributes: the
    worker reads them and nothing saves them, so no ORM instance is built (two per run, about
    0.09 ms each right after a script)."""
    return cast(RunFacts, SimpleNamespace(**row))


def claim(
    sessions: SessionFactory, run_id: str, worker: str, events: list[OwnerEvent]
) -> RunFacts | None:
    """Move a queued run to running for this worker; None if it was claimed or ended before.

    The API sends a run's message before it saves the run (broker/dispatcher.py), so a message
    can come before its row: the claim then waits for the row, up to RUN_SAVE_WAIT_SECONDS
    (the API saves it well within that or not at all). The owner's event for the move goes to
    `events`, for the caller to publish.
    """
    pause = 0.0005
    deadline = time.monotonic() + RUN_SAVE_WAIT_SECONDS
    saved = False
    while True:
        with core_transaction(sessions) as connection:
            rows = lifecycle.claim(connection, run_id, worker)
        if rows or saved or time.monotonic() > deadline:
            break
        # Saved since the claim missed it, the next claim finds it; saved before, it was
        # claimed or ended, and the next claim says so.
        saved = _saved(sessions, run_id)
        if not saved:
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
    if not rows:
        return None
    claimed = _facts(rows[0])
    ownerevents.add_run_state(events, claimed)
    return claimed


def _saved(sessions: SessionFactory, run_id: str) -> bool:
    with core_connection(sessions) as connection:
        return connection.scalar(select(Run.id).where(Run.id == run_id)) is not None


@dataclass(frozen=True)
class Finished:
    """A run's end as recorded, and the answer its tool call got from it (None: the call was
    no longer open, or the run has none)."""

    run: RunFacts
    answer: dict[str, Any] | None


def finish(
    sessions: SessionFactory,
    run_id: str,
    outcome: Outcome,
    isolation: str | None,
    events: list[OwnerEvent],
) -> Finished | None:
    """Record how a running run ended, and answer its tool call; None if it already ended.

    The owner's events for the end go to `events`, for the caller to publish.
    """
    values: dict[str, Any] = {
        "exit_code": outcome.exit_code,
        "stdout": outcome.stdout[-KEPT_OUTPUT_CHARS:],
        "stderr": outcome.stderr[-KEPT_OUTPUT_CHARS:],
        "error": outcome.error,
        "isolation": isolation,
    }
    ended: list[OwnerEvent] = []
    with core_transaction(sessions) as connection:
        rows = lifecycle.finish(connection, run_id, outcome.status, values)
        if not rows:
            return None
        run = _facts(rows[0])
        ownerevents.add_run_state(ended, run)
        answer = _answer_call(connection, run, outcome.code, ended)
    events.extend(ended)  # only once committed
    return Finished(run, answer)


def _answer_call(
    session: Session | CoreConnection,
    run: RunFacts,
    code: str | None = None,
    events: list[OwnerEvent] | None = None,
) -> dict[str, Any] | None:
    """The tool call that started the run ends with the run's result; returns the call's
    answer (status, result, error) when this gave it.

    `code` names why a run failed before its script ran; without it a failure is the script's.
    """
    if run.call_id is None:
        return None
    result = shape_result(run_result(run))
    error = None
    status = CallStatus.DONE
    if run.status != RunStatus.SUCCEEDED:
        status = CallStatus.FAILED
        code = code or ("script_failed" if run.status == RunStatus.FAILED else run.status)
        error = (code, run.error or f"The script ended {run.status.replace('_', ' ')}.")
    if not calls.answer(session, run.call_id, status, result=result, error=error, events=events):
        return None
    answer: dict[str, Any] = {"status": str(status), "result": result}
    if error is not None:
        answer["error"] = {"code": error[0], "message": error[1]}
    return answer


def run_result(run: RunFacts) -> dict[str, Any]:
    return {
        "run_id": run.id,
        "status": run.status,
        "exit_code": run.exit_code,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "node": run.node,
        "isolation": run.isolation,
    }


def get_run(sessions: SessionFactory, run_id: str, owner_id: int | None = None) -> Run:
    with sessions() as session:
        run = session.get(Run, run_id)
    if run is None or (owner_id is not None and run.owner_id != owner_id):
        raise RunNotFound(f"You have no run '{run_id}'.")
    return run


def request_cancel(
    sessions: SessionFactory,
    client: redis.Redis,
    run_id: str,
    owner_id: int,
    caps: StreamCaps = DEFAULT_CAPS,
) -> Run:
    """Cancel a run: a queued one ends at once; a running one is stopped by its runner."""
    run = get_run(sessions, run_id, owner_id)
    if run.status in lifecycle.END_STATES:
        raise RunFinished(f"The run already ended: it is {run.status}.")
    with transaction(sessions) as session:
        stopped = lifecycle.cancel_queued(session, run_id)
        if stopped:
            found = session.get(Run, run_id)
            assert found is not None
            ownerevents.note_run(session, found)
            _answer_call(session, found)
    if stopped:
        RunStream(client, run_id, caps).exit(RunStatus.CANCELLED, None)
    else:
        client.set(naming.run_cancel(run_id), "1", ex=3600)
    return get_run(sessions, run_id, owner_id)


def reap(
    sessions: SessionFactory, client: redis.Redis, caps: StreamCaps = DEFAULT_CAPS
) -> list[str]:
    """Answer `interrupted` for running runs whose worker instance stopped beating."""
    with sessions() as session:
        running = list(
            session.execute(select(Run.id, Run.worker).where(Run.status == RunStatus.RUNNING))
        )
    lost = [
        run_id for run_id, worker in running if worker and not heartbeat.is_alive(client, worker)
    ]
    reaped = []
    for run_id in lost:
        stdout, stderr = collected_output(client, run_id)
        message = "The worker running this script stopped; it will not run again."
        outcome = Outcome(RunStatus.INTERRUPTED, None, stdout, stderr, message)
        ended: list[OwnerEvent] = []
        if finish(sessions, run_id, outcome, None, ended):
            feed.publish_all(client, ended)
            RunStream(client, run_id, caps).exit(RunStatus.INTERRUPTED, None, error=outcome.error)
            announce(sessions, client, run_id)
            reaped.append(run_id)
    return reaped


def announce(sessions: SessionFactory, client: redis.Redis, run_id: str) -> None:
    """Tell the owner about a run that ended failed, timed out or interrupted."""
    run = get_run(sessions, run_id)
    if run.status not in ANNOUNCED or run.owner_id is None:
        return
    what = shlex.join(run.command) if run.command else f"{run.skill_name} {run.script}"
    message = run.error or f"{what} ended {run.status.replace('_', ' ')}."
    events.publish(
        client, run.owner_id, f"run.{run.status}",
        run_id=run.id, call_id=run.call_id, skill_name=run.skill_name, script=run.script,
        node=run.node, status=run.status, message=message,
    )  # fmt: skip

"""A run's life around its state (store/lifecycle/runs.py): the worker's claim and finish,
the tool call a run answers, cancelling, reaping and announcing ends to the owner.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from types import SimpleNamespace
from typing import Any, cast

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session

from broker.results import shape_result
from relay import events, feed, heartbeat, naming
from relay.counters import RUN_DURATION, RUN_QUEUE_WAIT
from relay.errors import RunFinished, RunNotFound
from relay.retention import DEFAULT_CAPS, StreamCaps
from relay.streams import RunStream, collected_output
from store import ownerevents
from store.auditevents import audit_run_ended, audit_run_started
from store.db import (
    CoreConnection,
    SessionFactory,
    core_transaction,
    transaction,
)
from store.lifecycle import calls
from store.lifecycle import runs as lifecycle
from store.limits import KEPT_OUTPUT_CHARS
from store.models import Run, RunFacts, utcnow
from store.ownerevents import OwnerEvent
from store.states import CallStatus, RunStatus

# A run still queued this long after its row was committed may have lost its message: the API
# stopped between its commit and its send (broker/dispatcher.py). The sweep sends it once more,
# at most RESEND_BATCH a round; the mark that it did lasts RESENT_MARK_SECONDS.
RESEND_AFTER_SECONDS = 120
RESEND_BATCH = 500
RESENT_MARK_SECONDS = 24 * 3600

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
    # The files the run made or changed in its working directory, as saved (store/files.py),
    # and a note when some were left out (caps, links, special files).
    files: tuple[dict[str, Any], ...] = ()
    files_note: str | None = None


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
        audit_run_ended(session, run)


def _facts(row: dict[str, Any]) -> RunFacts:
    """A run's row as read back by the claim or the finish, its columns as attributes: the
    worker reads them and nothing saves them, so no ORM instance is built (two per run, about
    0.09 ms each right after a script)."""
    return cast(RunFacts, SimpleNamespace(**row))


def claim(
    sessions: SessionFactory, run_id: str, worker: str, events: list[OwnerEvent]
) -> RunFacts | None:
    """Move a queued run to running for this worker; None if it was claimed or ended before,
    or was never saved.

    The API commits a run's row before it sends its message (broker/dispatcher.py), so one
    read decides: the conditional UPDATE lets exactly one claim of a run win, however many
    times its message is delivered. The owner's event for the move goes to `events`, for the
    caller to publish.
    """
    with core_transaction(sessions) as connection:
        rows = lifecycle.claim(connection, run_id, worker)
        if rows:
            audit_run_started(connection, _facts(rows[0]))
    if not rows:
        return None
    claimed = _facts(rows[0])
    ownerevents.add_run_state(events, claimed)
    return claimed


def resend_unsent(
    sessions: SessionFactory, client: redis.Redis, send: Callable[[str, str], object]
) -> list[str]:
    """Send (`send(run_id, queue)`) the message of each run queued for more than
    RESEND_AFTER_SECONDS once more, in case it never left; the ids sent.

    A second message of a run whose first one is still waiting in a busy queue costs nothing
    but its delivery: one claim wins, the other finds the run claimed.
    """
    cutoff = utcnow() - timedelta(seconds=RESEND_AFTER_SECONDS)
    with sessions() as session:
        queued = session.execute(
            select(Run.id, Run.queue)
            .where(Run.status == RunStatus.QUEUED, Run.created_at < cutoff)
            .order_by(Run.created_at)
            .limit(RESEND_BATCH)
        ).all()
    sent = []
    for run_id, queue in queued:
        if client.set(naming.run_resent(run_id), "1", nx=True, ex=RESENT_MARK_SECONDS):
            send(run_id, queue)
            sent.append(run_id)
    return sent


@dataclass(frozen=True)
class Finished:
    """A run's end as recorded, and `end` (`run_end`) when its tool call was answered with it
    (None: the call was no longer open, or the run has none)."""

    run: RunFacts
    end: dict[str, Any] | None


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
        "output_files": _output_files(outcome),
    }
    ended: list[OwnerEvent] = []
    with core_transaction(sessions) as connection:
        rows = lifecycle.finish(connection, run_id, outcome.status, values)
        if not rows:
            return None
        run = _facts(rows[0])
        ownerevents.add_run_state(ended, run)
        end = _answer_call(connection, run, outcome.code, ended)
        audit_run_ended(connection, run)
    events.extend(ended)  # only once committed
    return Finished(run, end)


def observe_start(pipe: Any, run: RunFacts) -> None:
    """Count a claimed run's wait in its queue (relay/counters.py), with `pipe`."""
    if run.started_at is not None and run.created_at is not None:
        waited = (run.started_at - run.created_at).total_seconds()
        RUN_QUEUE_WAIT.observe_to(pipe, waited, run.execution)


def observe_end(pipe: Any, run: RunFacts) -> None:
    """Count an ended run's duration (relay/counters.py), with `pipe`."""
    if run.started_at is not None and run.finished_at is not None:
        lasted = (run.finished_at - run.started_at).total_seconds()
        RUN_DURATION.observe_to(pipe, lasted, run.execution)


def _output_files(outcome: Outcome) -> list[dict[str, Any]] | None:
    if not outcome.files and outcome.files_note is None:
        return None
    files = [dict(entry) for entry in outcome.files]
    if outcome.files_note is not None:
        files.append({"note": outcome.files_note})
    return files


def _answer_call(
    session: Session | CoreConnection,
    run: RunFacts,
    code: str | None = None,
    events: list[OwnerEvent] | None = None,
) -> dict[str, Any] | None:
    """The tool call that started the run ends with the run's result (`answer_of`); returns
    the run's end (`run_end`) it was answered from, or None when the call was no longer open.

    `code` names why a run failed before its script ran; without it a failure is the script's.
    """
    if run.call_id is None:
        return None
    end = run_end(run, code)
    answer = answer_of(end)
    error = answer.get("error")
    answered = calls.answer(
        session,
        run.call_id,
        answer["status"],
        result=answer["result"],
        error=(error["code"], error["message"]) if error else None,
        events=events,
    )
    return end if answered else None


def run_end(run: RunFacts, code: str | None = None) -> dict[str, Any]:
    """What a run's end entry says of the run (relay.streams.RunStream.exit): its status, its
    result as its call keeps it (credentials redacted, capped: `shape_result`), its error and
    the error's stable code. Whoever answers the run's call makes the answer from it
    (`answer_of`): the worker for the call's row, the API for a waiting client."""
    return {
        "status": run.status,
        "result": shape_result(run_result(run)),
        "error": run.error,
        "code": code,
    }


def answer_of(end: dict[str, Any]) -> dict[str, Any]:
    """The answer a run's tool call gets from the run's end (`run_end`): its status, the
    result and, unless the run succeeded, the error."""
    status = end["status"]
    answer: dict[str, Any] = {"result": end["result"]}
    if status == RunStatus.SUCCEEDED:
        answer["status"] = str(CallStatus.DONE)
        return answer
    answer["status"] = str(CallStatus.FAILED)
    code = end.get("code") or ("script_failed" if status == RunStatus.FAILED else status)
    message = end.get("error") or f"The script ended {status.replace('_', ' ')}."
    answer["error"] = {"code": code, "message": message}
    return answer


def run_result(run: RunFacts) -> dict[str, Any]:
    result: dict[str, Any] = {
        "run_id": run.id,
        "status": run.status,
        "exit_code": run.exit_code,
        "stdout": run.stdout,
        "stderr": run.stderr,
        "node": run.node,
        "isolation": run.isolation,
    }
    made = run.output_files or []
    result["files"] = [entry for entry in made if "note" not in entry]
    notes = [entry["note"] for entry in made if "note" in entry]
    if notes:
        result["files_note"] = notes[0]
    return result


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
            audit_run_ended(session, found)
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
    gone = heartbeat.lost_among(client, [worker for _, worker in running if worker])
    lost = [run_id for run_id, worker in running if worker in gone]
    reaped = []
    for run_id in lost:
        stdout, stderr = collected_output(client, run_id)
        message = "The worker running this script stopped; it will not run again."
        outcome = Outcome(RunStatus.INTERRUPTED, None, stdout, stderr, message)
        ended: list[OwnerEvent] = []
        finished = finish(sessions, run_id, outcome, None, ended)
        if finished:
            feed.publish_all(client, ended)
            stream = RunStream(client, run_id, caps)
            stream.also(partial(observe_end, run=finished.run))
            stream.exit(RunStatus.INTERRUPTED, None, error=outcome.error)
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

"""Beat's housekeeping on the control worker: a short round every few seconds, a sweep a minute.

`housekeep` (every `SKILLFLEET_HOUSEKEEPING_SECONDS`, 5 by default; relay/app.py) answers
`interrupted` for runs, job runs and turns whose worker stopped beating, removes the oldest
ended streams past the kept count (relay/retention.py) and wakes the notifier when a webhook
retry is due. `sweep` (every `SKILLFLEET_SWEEP_SECONDS`, 60) expires approvals and questions
nobody answered, drops old turn counts, lets job runs whose approval or question was settled
carry on and removes audit records past their own retention (SKILLFLEET_AUDIT_RETENTION_DAYS,
never with the runs); its task then delivers what notices a lost wake left behind. Neither
task sends task events, and beat does not log sending them: Flower and beat's log show the
work that was asked for, not the clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import redis
import structlog

from broker import questions, runs
from broker.approvals import expire_due
from broker.turns import forget_old
from relay import naming, notifier, retention
from relay.retention import StreamCaps
from store import audit
from store.db import SessionFactory, transaction
from store.limits import SWEEP_BATCH, SWEEP_BATCHES
from store.settings import DEFAULT_AUDIT_RETENTION_DAYS
from workers import jobruns, turns

log = structlog.get_logger(__name__)


def housekeep(sessions: SessionFactory, client: redis.Redis, caps: StreamCaps) -> int:
    """One short round; returns how many runs, job runs and turns it answered `interrupted`."""
    reaped = runs.reap(sessions, client, caps)
    if reaped:
        log.warning("runs interrupted", runs=reaped)
    lost_jobs = jobruns.reap(sessions, client)
    if lost_jobs:
        log.warning("job runs interrupted", job_runs=lost_jobs)
    lost_turns = turns.reap(sessions, client, caps)
    if lost_turns:
        log.warning("turns interrupted", turns=lost_turns)
    trimmed = retention.trim(client, caps.kept)
    if trimmed:
        log.debug("ended streams removed", streams=trimmed)
    owner_id = retry_due(client)
    if owner_id is not None:
        notifier.wake(client, owner_id)  # its task tries every due delivery, any owner's
    return len(reaped) + len(lost_jobs) + len(lost_turns)


def retry_due(client: redis.Redis) -> int | None:
    """The owner of a webhook delivery whose time to be tried again has come, if any."""
    due: Any = client.zrangebyscore(naming.webhook_retries(), "-inf", time.time(), start=0, num=1)
    return int(json.loads(due[0])["owner"]) if due else None


def sweep(
    sessions: SessionFactory,
    send_job_run: Callable[[str], object],
    batch: int = SWEEP_BATCH,
    batches: int = SWEEP_BATCHES,
    audit_retention: timedelta = timedelta(days=DEFAULT_AUDIT_RETENTION_DAYS),
) -> int:
    """The minute's round; returns how many approvals and questions expired.

    Each step works in transactions of at most `batch` rows, and at most `batches` of them a
    round: a backlog (a day of turn counts, approvals that expired while the workers were
    down) holds no lock long and no transaction large; the next round goes on with what is left.
    """
    for _ in range(batches):
        with transaction(sessions) as session:
            if forget_old(session, batch) < batch:
                break
    expired = 0
    for _ in range(batches):
        with transaction(sessions) as session:
            ended = expire_due(session, limit=batch)
            ended += questions.expire_due(session, limit=batch)
        expired += ended
        if ended < batch:
            break
    # A job run waiting on an approval or question that just expired ends `unanswered`.
    for job_run_id in jobruns.settled_waiting(sessions):
        send_job_run(job_run_id)
    trimmed = trim_audit(sessions, audit_retention, batch, batches)
    if trimmed:
        log.info("audit records past their retention removed", records=trimmed)
    return expired


def trim_audit(sessions: SessionFactory, retention: timedelta, batch: int, batches: int) -> int:
    """Remove audit records older than `retention`, oldest first, a batch per transaction:
    the audit trail's own retention, apart from the runs and calls it describes."""
    trimmed = 0
    for _ in range(batches):
        with transaction(sessions) as session:
            removed = audit.trim(session, retention, batch)
        trimmed += removed
        if removed < batch:
            break
    return trimmed

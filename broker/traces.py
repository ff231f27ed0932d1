"""A call that waits for its owner stays in its trace (store/tracing.py).

The call's trace context is kept in Redis with its approval; the owner's answer, whenever and
wherever it comes, is a span of that trace from the moment the owner was asked: the wait shows
as its length, and what the answer starts (the run's task, a job run carried on) joins the trace
under it, linked to the request that answered. Nothing is kept or read when traces are off.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis
import structlog

from broker.approvals import APPROVAL_LIFE
from relay import naming
from store import tracing

log = structlog.get_logger(__name__)
# Kept a little past the approval's life: an answer can't come later.
KEPT_SECONDS = int(APPROVAL_LIFE.total_seconds()) + 60


def keep(client: redis.Redis | None, approval_id: str) -> None:
    """Keep the current trace's context for the answer to `approval_id`."""
    carried = tracing.carrier()
    if not carried or client is None:
        return
    kept = json.dumps({"context": carried, "asked_ns": time.time_ns()})
    try:
        client.set(naming.approval_trace(approval_id), kept, ex=KEPT_SECONDS)
    except redis.RedisError as e:  # the answer then starts a trace of its own
        log.warning("trace context not kept", approval_id=approval_id, error=repr(e))


@contextmanager
def answering(client: redis.Redis | None, approval_id: str, decision: str) -> Iterator[None]:
    """The owner's answer to `approval_id`, in the trace of the call it answers."""
    if not tracing.enabled() or client is None:
        yield
        return
    try:
        raw = client.get(naming.approval_trace(approval_id))
        kept = json.loads(raw) if raw else None
    except (redis.RedisError, ValueError) as e:
        log.warning("trace context not read", approval_id=approval_id, error=repr(e))
        kept = None
    if not isinstance(kept, dict) or not isinstance(kept.get("context"), dict):
        with tracing.span("skillfleet.approval", approval_id=approval_id, decision=decision):
            yield
        return
    asked = kept.get("asked_ns")
    with tracing.joined(
        kept["context"],
        "skillfleet.approval",
        asked if isinstance(asked, int) else None,
        approval_id=approval_id,
        decision=decision,
    ):
        yield

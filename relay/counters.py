"""Counters every process adds to, kept in Redis so that /metrics gives the fleet's totals.

The run histograms are kept the same way: each run's queue wait is observed when a worker
claims it, its duration when it ends (workers/execute.py, broker/runs.py `reap`), in the round
trip that writes its stream; /metrics reads a few hashes, however many runs there were.

Deliveries are made on control workers, and policy decisions wherever a call is decided: an API
process, or a control worker running a job step or an agent turn, often in another container
than the API. Prometheus multiprocess files reach only the processes of one machine, so these
counts go to Redis: one hash per counter (relay/naming.py `counter`), one field per set of label
values (a JSON list), added to with HINCRBY. The API's /metrics reads them back
(api/collector.py). Redis keeps them across restarts; a Redis outage loses counts, never the work
being counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from relay import naming

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class FleetCounter:
    """A counter whose count is kept in Redis; `name` without Prometheus' `_total`."""

    name: str
    documentation: str
    labels: tuple[str, ...]

    def add(self, client: redis.Redis | None, *values: str, amount: int = 1) -> None:
        """Add `amount` to the count of these label values; never raises for Redis."""
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes {len(self.labels)} label values")
        if client is None:
            return
        try:
            self.add_to(client, *values, amount=amount)
        except redis.RedisError as e:
            log.warning("count lost", counter=self.name, error_type=type(e).__name__)

    def add_to(self, pipe: Any, *values: str, amount: int = 1) -> None:
        """Add to the count with `pipe` (a client, or a pipeline that carries other commands)."""
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes {len(self.labels)} label values")
        pipe.hincrby(naming.counter(self.name), json.dumps(values), amount)


POLICY_DECISIONS = FleetCounter(
    "skillfleet_policy_decisions",
    "Policy decisions by the rule that gave them (default: the default action) and action.",
    ("rule", "action"),
)
DELIVERIES = FleetCounter(
    "skillfleet_deliveries",
    "Push and webhook delivery attempts by channel (push, webhook) and outcome "
    "(delivered, failed).",
    ("channel", "outcome"),
)
FAILED_LOGINS = FleetCounter(
    "skillfleet_failed_logins",
    "Requests with a wrong token (refused), and client addresses locked out after too many of "
    "them (locked); relay/lockouts.py.",
    ("outcome",),
)
FLEET_COUNTERS = (POLICY_DECISIONS, DELIVERIES, FAILED_LOGINS)

SUM = "sum"  # the field of a histogram's sum (in microseconds), beside its buckets' bounds
MICROS = 1_000_000


@dataclass(frozen=True)
class FleetHistogram:
    """A histogram whose counts are kept in Redis: a hash (relay/naming.py `counter`) with one
    field per label values and bucket (`[..., "0.5"]`: observations above the bound before it
    and at most this one; `"+Inf"` above the last) and one per label values' sum, in
    microseconds (`[..., "sum"]`)."""

    name: str
    documentation: str
    labels: tuple[str, ...]
    bounds: tuple[float, ...]

    def observe_to(self, pipe: Any, seconds: float, *values: str) -> None:
        """Count one observation with `pipe` (a client, or a pipeline of other commands)."""
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes {len(self.labels)} label values")
        seconds = max(0.0, seconds)
        bound = next((_bound(b) for b in self.bounds if seconds <= b), "+Inf")
        key = naming.counter(self.name)
        pipe.hincrby(key, json.dumps([*values, bound]), 1)
        pipe.hincrby(key, json.dumps([*values, SUM]), round(seconds * MICROS))


@dataclass(frozen=True)
class Observed:
    """A histogram's counts for one set of label values, its buckets cumulative as
    Prometheus gives them (the last is `+Inf`: every observation)."""

    buckets: list[tuple[str, int]]
    sum: float


RUN_DURATION = FleetHistogram(
    "skillfleet_run_duration_seconds",
    "Seconds from a run's start to its end, by runner.",
    ("runner",),
    (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
RUN_QUEUE_WAIT = FleetHistogram(
    "skillfleet_run_queue_wait_seconds",
    "Seconds a run waited in its queue before a worker started it, by runner.",
    ("runner",),
    (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
FLEET_HISTOGRAMS = (RUN_DURATION, RUN_QUEUE_WAIT)


def read(
    client: redis.Redis, counters: Iterable[FleetCounter] = FLEET_COUNTERS
) -> list[tuple[FleetCounter, dict[tuple[str, ...], int]]]:
    """Every counter's counts by label values, in one round trip; raises redis.RedisError."""
    wanted = list(counters)
    found = []
    for counter, fields in zip(wanted, _hashes(client, wanted), strict=True):
        counts: dict[tuple[str, ...], int] = {}
        for field, count in fields.items():
            values = json.loads(field)
            if isinstance(values, list) and len(values) == len(counter.labels):
                counts[tuple(str(v) for v in values)] = int(count)
        found.append((counter, counts))
    return found


def read_histograms(
    client: redis.Redis, histograms: Iterable[FleetHistogram] = FLEET_HISTOGRAMS
) -> list[tuple[FleetHistogram, dict[tuple[str, ...], Observed]]]:
    """Every histogram's counts by label values, in one round trip; raises redis.RedisError."""
    wanted = list(histograms)
    return [
        (histogram, _observed(histogram, fields))
        for histogram, fields in zip(wanted, _hashes(client, wanted), strict=True)
    ]


def _hashes(client: redis.Redis, kept: list[FleetCounter] | list[FleetHistogram]) -> list[Any]:
    """The Redis hash each of `kept` is counted in, in one round trip."""
    with client.pipeline(transaction=False) as pipe:
        for each in kept:
            pipe.hgetall(naming.counter(each.name))
        replies: list[Any] = pipe.execute()
    return replies


def _observed(histogram: FleetHistogram, fields: dict[Any, Any]) -> dict[tuple[str, ...], Observed]:
    counts: dict[tuple[str, ...], dict[str, int]] = {}
    width = len(histogram.labels)
    for field, count in fields.items():
        found = json.loads(field)
        if isinstance(found, list) and len(found) == width + 1:
            values = tuple(str(v) for v in found[:width])
            counts.setdefault(values, {})[str(found[width])] = int(count)
    observed = {}
    for values, by_bound in sorted(counts.items()):
        buckets, seen = [], 0
        for bound in [*(_bound(b) for b in histogram.bounds), "+Inf"]:
            seen += by_bound.get(bound, 0)
            buckets.append((bound, seen))
        observed[values] = Observed(buckets, by_bound.get(SUM, 0) / MICROS)
    return observed


def _bound(value: float) -> str:
    return str(float(value))

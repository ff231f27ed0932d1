"""Counters every process adds to, kept in Redis so that /metrics gives the fleet's totals.

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


def read(
    client: redis.Redis, counters: Iterable[FleetCounter] = FLEET_COUNTERS
) -> list[tuple[FleetCounter, dict[tuple[str, ...], int]]]:
    """Every counter's counts by label values, in one round trip; raises redis.RedisError."""
    wanted = list(counters)
    with client.pipeline(transaction=False) as pipe:
        for counter in wanted:
            pipe.hgetall(naming.counter(counter.name))
        replies: list[Any] = pipe.execute()
    found = []
    for counter, fields in zip(wanted, replies, strict=True):
        counts: dict[tuple[str, ...], int] = {}
        for field, count in fields.items():
            values = json.loads(field)
            if isinstance(values, list) and len(values) == len(counter.labels):
                counts[tuple(str(v) for v in values)] = int(count)
        found.append((counter, counts))
    return found
